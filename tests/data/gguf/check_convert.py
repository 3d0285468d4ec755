"""Reads a GGUF file written by `mmgen convert` with the `gguf` Python package (llama.cpp's reader)
and checks it against the safetensors it came from: every tensor present with its shape, f32 ones
equal to the bit, q8_0/f16/bf16 ones within their rounding. It shows that the file is readable by
other tools. It is a script run by hand (pip install gguf numpy), never a test dependency; it
reads the safetensors itself (bf16 included, which numpy lacks).
usage: python3 check_convert.py FILE.gguf SOURCE_FOLDER_OR_FILE"""
import glob
import json
import os
import sys

import numpy as np
from gguf import GGUFReader, GGMLQuantizationType
from gguf.quants import dequantize

NUMPY = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64, "I32": np.int32}


def read_safetensors(file):
    """Every tensor of a .safetensors file as float32 (the format: an 8-byte header length, a JSON
    header of dtype, shape and data_offsets per tensor, then the bytes)."""
    with open(file, "rb") as f:
        data = f.read()
    length = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + length])
    body = memoryview(data)[8 + length:]
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        raw = body[begin:end]
        if entry["dtype"] == "BF16":
            values = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            values = np.frombuffer(raw, NUMPY[entry["dtype"]]).astype(np.float32)
        tensors[name] = values.reshape(entry["shape"])
    return tensors


path, source = sys.argv[1], sys.argv[2]
files = sorted(glob.glob(os.path.join(source, "*.safetensors"))) if os.path.isdir(source) else [source]
reference = {}
for f in files:
    reference.update(read_safetensors(f))

reader = GGUFReader(path)
fields = {name: field for name, field in reader.fields.items()}
print("architecture:", bytes(fields["general.architecture"].parts[-1]).decode())
counts, worst = {}, {}
for t in reader.tensors:
    kind = GGMLQuantizationType(t.tensor_type).name
    counts[kind] = counts.get(kind, 0) + 1
    values = dequantize(t.data, t.tensor_type).astype(np.float32)
    shape_key = "comfy.gguf.orig_shape." + t.name
    if shape_key in fields:
        shape = [int(fields[shape_key].parts[i][0]) for i in fields[shape_key].data]
    else:
        shape = [int(d) for d in reversed(t.shape)]
    expected = reference[t.name]
    assert list(expected.shape) == shape, (t.name, expected.shape, shape)
    values = values.reshape(shape)
    error = float(np.abs(values - expected).max()) if expected.size else 0.0
    if kind == "F32":
        assert error == 0.0, (t.name, error)
    elif kind == "Q8_0":
        assert error <= (0.5 + 127 / 2048) * float(np.abs(expected).max()) / 127, (t.name, error)
    worst[kind] = max(worst.get(kind, 0.0), error)
assert set(reference) == {t.name for t in reader.tensors}, "tensor names differ"
print("tensors by type:", json.dumps(counts), "largest error by type:", json.dumps(worst))
print("OK: every tensor reads back with the gguf package")
