"""diffusers' WanTransformer3DModel on text embeddings with a zero-filled tail, the way WanPipeline
pads every prompt to max_sequence_length: the reference for mmgen's repeated-key shortcut
(attention/repeated_keys.h). Writes reference.safetensors beside this script.

Inputs are the wan-tiny fixture's (../shared/fixtures/wan-tiny): its transformer, its
`transformer.hidden_states`, and its `transformer.encoder_hidden_states` with rows from 9 on
(element 0) and from 5 on (element 1, whose rows are also scaled by -0.75) set to zero.

    pip install torch diffusers safetensors
    python3 tests/data/wan_padded_text/make.py ../shared/fixtures/wan-tiny
"""
import os
import sys

import torch
from diffusers import WanTransformer3DModel
from safetensors.torch import load_file, save_file

fixture = sys.argv[1]
reference = load_file(os.path.join(fixture, "reference", "reference.safetensors"))
model = WanTransformer3DModel.from_pretrained(os.path.join(fixture, "model", "transformer"),
                                              torch_dtype=torch.float32).eval()
latents = reference["transformer.hidden_states"].repeat(2, 1, 1, 1, 1)
text = reference["transformer.encoder_hidden_states"].repeat(2, 1, 1).clone()
text[1] *= -0.75
text[0, 9:] = 0
text[1, 5:] = 0
with torch.no_grad():
    out = model(hidden_states=latents, timestep=torch.tensor([431.5, 431.5]),
                encoder_hidden_states=text, return_dict=False)[0]
save_file({"latents": latents.contiguous(), "text": text.contiguous(), "out_t431": out.contiguous()},
          os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference.safetensors"))
print("wrote", out.shape, "from", torch.__version__)
