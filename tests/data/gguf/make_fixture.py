"""Writes tests/data/gguf/types.gguf with the `gguf` Python package (pip install gguf; 0.17.1 made
the committed file): one small tensor of every type mmgen reads, each with what the package's own
dequantize makes of it as an f32 tensor "<name>.expected", for tests/gguf_test.cpp to match bit for
bit. The legacy quants are the package's quantization of random values; the K-quants (which the
package dequantizes but does not quantize) are random blocks with finite scales.
usage: python3 tests/data/gguf/make_fixture.py tests/data/gguf/types.gguf"""
import sys
import numpy as np
import gguf
from gguf.quants import quantize, dequantize

T = gguf.GGMLQuantizationType
rng = np.random.RandomState(20261128)
out = gguf.GGUFWriter(sys.argv[1], "mmgen-test")
out.add_uint32("mmgen.test.count", 7)
out.add_array("mmgen.test.list", [1, 2, 3])
out.add_string("mmgen.test.text", "grüße")


def add(name, stored, kind, expected):
    out.add_tensor(name, stored, raw_dtype=kind)
    out.add_tensor(name + ".expected", expected.astype(np.float32))


values = (rng.randn(2, 3, 64) * 0.7).astype(np.float32)
add("f32", values, T.F32, values)
add("f16", values.astype(np.float16), T.F16, values.astype(np.float16).astype(np.float32))
bf16 = quantize(values, T.BF16)
add("bf16", bf16, T.BF16, dequantize(bf16, T.BF16))
for kind in (T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1):
    stored = quantize(values, kind)
    add(kind.name.lower(), stored, kind, dequantize(stored, kind))

# K-quants: random super-blocks; the fp16 scales set to finite values of either sign.
layouts = {T.Q4_K: (144, [0, 2]), T.Q5_K: (176, [0, 2]), T.Q6_K: (210, [208])}
for kind, (size, halves) in layouts.items():
    blocks = rng.randint(0, 256, size=(3, 2, size)).astype(np.uint8)
    for at in halves:
        scales = (rng.randn(3, 2) * 0.01).astype(np.float16)
        blocks[:, :, at:at + 2] = scales.view(np.uint8).reshape(3, 2, 2)
    blocks = blocks.reshape(3, 2 * size)  # rows of 512 elements
    add(kind.name.lower(), blocks, kind, dequantize(blocks, kind))

out.write_header_to_file()
out.write_kv_data_to_file()
out.write_tensors_to_file()
out.close()
print("wrote", sys.argv[1])
