"""Writes a random-weight FLUX.1-dev-sized diffusers folder for `mmgen generate`: the transformer and
VAE ../shared/tools/peers/image_anchors.py times in diffusers (FluxTransformer2DModel with the class
defaults and guidance embeds, 11.9B; the FLUX VAE; bf16, built on the GPU with seed 0), CLIP-L at its
real size, a 2-layer T5 of T5-XXL's width (the anchor skips the encoders: mmgen's encode stage is
reported apart), FLUX.1-dev's scheduler, and the tokenizer folders of tests/fixtures/flux-tiny.
usage: python3 flux_dev_folder.py DIR FLUX_TINY_MODEL_DIR   (needs torch, diffusers, transformers)"""
import json
import os
import shutil
import sys

import torch
from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxTransformer2DModel
from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel

out, tiny = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
with torch.device("cuda"):
    transformer = FluxTransformer2DModel(guidance_embeds=True).to(torch.bfloat16)
    vae = AutoencoderKL(in_channels=3, out_channels=3, latent_channels=16,
                        block_out_channels=(128, 256, 512, 512),
                        down_block_types=("DownEncoderBlock2D",) * 4,
                        up_block_types=("UpDecoderBlock2D",) * 4, layers_per_block=2,
                        scaling_factor=0.3611, shift_factor=0.1159, use_quant_conv=False,
                        use_post_quant_conv=False).to(torch.bfloat16)
    clip = CLIPTextModel(CLIPTextConfig(
        vocab_size=49408, hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
        num_attention_heads=12, max_position_embeddings=77, hidden_act="quick_gelu",
        projection_dim=768, bos_token_id=0, eos_token_id=2, pad_token_id=1)).to(torch.bfloat16)
    t5 = T5EncoderModel(T5Config(
        vocab_size=32128, d_model=4096, d_kv=64, d_ff=10240, num_heads=64, num_layers=2,
        feed_forward_proj="gated-gelu", tie_word_embeddings=False)).to(torch.bfloat16)
os.makedirs(out, exist_ok=True)
transformer.save_pretrained(os.path.join(out, "transformer"), max_shard_size="10GB")
vae.save_pretrained(os.path.join(out, "vae"))
clip.save_pretrained(os.path.join(out, "text_encoder"))
t5.save_pretrained(os.path.join(out, "text_encoder_2"), max_shard_size="5GB")
FlowMatchEulerDiscreteScheduler(shift=3.0, use_dynamic_shifting=True, base_shift=0.5, max_shift=1.15,
                                base_image_seq_len=256, max_image_seq_len=4096).save_pretrained(
    os.path.join(out, "scheduler"))
for name in ("tokenizer", "tokenizer_2"):
    shutil.copytree(os.path.join(tiny, name), os.path.join(out, name), dirs_exist_ok=True)
shutil.copy(os.path.join(tiny, "model_index.json"), os.path.join(out, "model_index.json"))
print("made", out, "transformer %.2fB params" % (sum(p.numel() for p in transformer.parameters()) / 1e9))
