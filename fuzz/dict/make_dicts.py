#!/usr/bin/env python3
"""Writes one libFuzzer dictionary per fuzz target (fuzz/dict/<target>.dict): the string literals
of the parsers each target reaches (the keys, types and keywords a valid input is made of, which
random mutation seldom spells), plus each format's own syntax and magic bytes. scripts/fuzz.sh
passes them as -dict. Run it again after a parser learns new keys:  python3 fuzz/dict/make_dicts.py
"""
import glob
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Each target: the sources whose literals it reads, and the format's syntax.
JSON = ['{', '}', '[', ']', ':', ',', '"', 'true', 'false', 'null', '1e308', '-0', '\\u0000', '\\ud83e']
TARGETS = {
    'fuzz_safetensors': (['core/safetensors.cpp', 'core/json.cpp', 'core/dtype*.cpp'],
                         JSON + ['__metadata__', 'dtype', 'shape', 'data_offsets', 'F32', 'F16',
                                 'BF16', 'F8_E4M3', 'I64', '\\x00\\x00\\x00\\x00\\x00\\x00\\x00']),
    'fuzz_lora': (['models/lora/lora_file.cpp', 'models/lora/lora_merge.cpp', 'models/dit/wan/wan_weights.cpp',
                   'models/dit/flux/flux_bfl_names.cpp', 'core/safetensors.cpp', 'core/low_rank.cpp'],
                  JSON + ['__metadata__', 'dtype', 'shape', 'data_offsets', 'F32', 'BF16', 'F16',
                          'transformer.blocks.0.attn1.to_q', 'diffusion_model.blocks.0.self_attn.q',
                          'lora_unet_double_blocks_0_img_attn_qkv', 'diffusion_model.single_blocks.0.linear1',
                          'diffusion_model.final_layer.adaLN_modulation.1', '.lora_A.default.weight']),
    'fuzz_gguf': (['core/gguf.cpp', 'core/gguf_quants.cpp'],
                  ['GGUF', '\\x03\\x00\\x00\\x00', '\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00',
                   'general.architecture', 'general.alignment', '\\x20\\x00\\x00\\x00']),
    'fuzz_model_index': (['pipeline/model_index.cpp', 'pipeline/registry.cpp', 'core/config_fields.cpp',
                          'pipeline/component_classes.cpp', 'pipeline/*/*_spec.cpp',
                          'models/dit/*/*config*.cpp', 'models/text_encoders/*config*.cpp',
                          'models/vae/*config*.cpp', 'pipeline/schedulers/*.cpp'], JSON),
    'fuzz_config_yaml': (['generate/settings.cpp', 'generate/options*.cpp', 'core/yaml.cpp',
                          'attention/backend_config.cpp', 'attention/backends/*/*.cpp'],
                         [': ', '\\x0a', '- ', '[', ']', '{', '}', '&a', '*a', '<<', '!!str', '---',
                          '|', '>', '#', "'", '"']),
    'fuzz_backend_config': (['attention/backend_config.cpp', 'attention/backends/*/*.cpp',
                             'attention/catalogue.cpp'], JSON + ['=', '.', '[1,2,3]', '.json', '.yaml']),
    'fuzz_tokenizer_json': ([f'text/{name}.cpp' for name in (
        'tokenizer', 'model', 'normalizers', 'pre_tokenizers', 'decoders', 'post_processor',
        'bpe_model', 'unigram_model', 'added_vocabulary', 'precompiled_charsmap', 'regex')] +
        ['text/json_fields.h'], JSON + ['(?i:', '\\p{L}', '\\s+', '[^\\s]']),
    'fuzz_tokenize': ([], ['&amp;', '&lt;', '&#x41;', '&#65;', ' ', '  ', '\\x0a', '\\xf0\\x9f\\xa6\\x8a',
                           '\\xe6\\x9d\\xb1', '\\xcc\\x81', '</s>', '<|im_start|>', '<|endoftext|>']),
    'fuzz_sta_mask': (['attention/backends/sliding_tile_attn/*.cpp'], JSON + ['1_0_0', '_']),
    'fuzz_npy': (['core/npy.cpp'], ['\\x93NUMPY', '\\x01\\x00', '\\x02\\x00', '\\x03\\x00', "'descr'",
                                    "'fortran_order'", "'shape'", "'<f4'", "'<f2'", "'<f8'", "'|u1'",
                                    "'<i8'", "'|b1'", 'False', 'True', '()', '(1,)', ', ']),
    'fuzz_chat_template': (['text/jinja_*.cpp', 'text/chat_template.cpp'],
                           ['{{', '}}', '{%', '%}', '{#', '#}', '{%-', '-%}', '|', '.', '(', ')',
                            'loop.index0', 'messages', 'endfor', 'endif', 'endmacro', 'namespace']),
    'fuzz_added_tokens': ([], ['|', '\\x0a', '<', '>', '<|im_start|>', '<|', '|>', '</s>']),
    'fuzz_config_fields': (['core/config_fields.cpp', 'core/json.cpp', 'core/text.cpp'],
                           JSON + ['9223372036854775807', '-9223372036854775808', '4294967296', '1e30',
                                   '\\x1b[31m', '\\xc2\\x85', '\\xff']),
}

LITERAL = re.compile(r'"((?:[^"\\\n]|\\.){2,40})"')


def literals(patterns):
    found = set()
    for pattern in patterns:
        for path in glob.glob(os.path.join(ROOT, pattern)):
            text = open(path, encoding='utf-8').read()
            for value in LITERAL.findall(text):
                # Words a format is made of, not messages: no spaces, no format braces.
                if ' ' in value or '{}' in value or '\\' in value or len(value) < 2:
                    continue
                found.add(value)
    return found


def main():
    for target, (sources, syntax) in TARGETS.items():
        words = sorted(literals(sources) | set(syntax))
        path = os.path.join(ROOT, 'fuzz', 'dict', target + '.dict')
        with open(path, 'w', encoding='utf-8') as out:
            out.write(f'# {target}: written by fuzz/dict/make_dicts.py (the parsers\' literals and the format\'s syntax)\n')
            for word in words:
                # libFuzzer knows only \\, \" and \xNN: keep the \xNN bytes, double other backslashes.
                quoted = word if '\\x' in word else word.replace('\\', '\\\\')
                out.write('"' + quoted.replace('"', '\\"') + '"\n')
        print(f'{target}: {len(words)} entries')


if __name__ == '__main__':
    main()
