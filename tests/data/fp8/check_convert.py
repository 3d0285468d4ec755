"""Reads a safetensors file written by `mmgen convert --type fp8_e4m3` with numpy and ml_dtypes
(JAX's float8_e4m3fn, an implementation independent of mmgen's) and checks it against the
safetensors it came from, as ComfyUI's loader would take it:
- the `scaled_fp8` marker is there, as float8_e4m3fn, and is not two values (which would ask for
  full-precision products);
- every weight with a `<layer>.scale_weight` is float8_e4m3fn, its scale a 0-d float32 equal to
  max |w| / 448, and its bytes are ml_dtypes' round-to-nearest-even cast of w / scale;
- every other tensor is the source's, byte for byte, in its stored dtype;
- the dequantized weights (e4m3 . scale, as ComfyUI computes them) are within half an e4m3 step.
It is a script run by hand (pip install numpy ml_dtypes), never a test dependency.
usage: python3 check_convert.py FILE.safetensors SOURCE_FOLDER_OR_FILE"""
import glob
import json
import os
import sys

import ml_dtypes
import numpy as np

TYPES = {"F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16,
         "F8_E4M3": ml_dtypes.float8_e4m3fn, "I64": np.int64, "I32": np.int32}


def read_safetensors(file):
    """Every tensor of a .safetensors file in its stored dtype (an 8-byte header length, a JSON
    header of dtype, shape and data_offsets per tensor, then the bytes)."""
    with open(file, "rb") as f:
        data = f.read()
    length = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + length])
    body = data[8 + length:]
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        values = np.frombuffer(body[begin:end], dtype=TYPES[entry["dtype"]])
        tensors[name] = (entry["dtype"], values.reshape(entry["shape"]))
    return tensors, header.get("__metadata__", {})


def main():
    out, source = sys.argv[1], sys.argv[2]
    files = sorted(glob.glob(os.path.join(source, "*.safetensors"))) if os.path.isdir(source) \
        else [source]
    original = {}
    for file in files:
        original.update(read_safetensors(file)[0])
    written, metadata = read_safetensors(out)
    assert "scaled_fp8" in written and written["scaled_fp8"][0] == "F8_E4M3", "no scaled_fp8 marker"
    assert written["scaled_fp8"][1].size != 2, "the marker asks for full-precision products"
    quantized = kept = 0
    worst = 0.0
    for name, (dtype, source_values) in original.items():
        assert name in written, f"{name} is missing"
        layer = name[:-len("weight")] if name.endswith(".weight") else name + "."
        scale_name = layer + "scale_weight"
        if scale_name not in written:
            assert written[name][0] == dtype, f"{name}: {written[name][0]}, stored as {dtype}"
            assert written[name][1].tobytes() == source_values.tobytes(), f"{name} changed"
            kept += 1
            continue
        quantized += 1
        w = source_values.astype(np.float32)
        scale_dtype, scale = written[scale_name]
        assert scale_dtype == "F32" and scale.shape == (), f"{scale_name}: {scale_dtype} {scale.shape}"
        amax = np.float32(np.abs(w).max())
        expected_scale = amax / np.float32(448.0) if amax > 0 else np.float32(1.0)
        assert scale == expected_scale, f"{scale_name}: {scale} against max |w| / 448 {expected_scale}"
        e4m3 = (w / scale).astype(ml_dtypes.float8_e4m3fn)
        assert written[name][0] == "F8_E4M3", f"{name}: {written[name][0]}"
        assert written[name][1].tobytes() == e4m3.tobytes(), f"{name}: bytes differ from ml_dtypes' cast"
        dequantized = written[name][1].astype(np.float32) * scale
        # Half a step of e4m3 (3 mantissa bits) relative, or half the subnormal step 2^-10 . scale.
        bound = np.maximum(np.abs(w) * 2.0**-4, scale * 2.0**-10) * 1.0001
        assert np.all(np.abs(dequantized - w) <= bound), f"{name}: beyond half an e4m3 step"
        worst = max(worst, float(np.abs(dequantized - w).max() / max(amax, 1e-30)))
    extra = set(written) - set(original) - {"scaled_fp8"} - \
        {n for n in written if n.endswith(".scale_weight")}
    assert not extra, f"unexpected tensors {sorted(extra)}"
    print(f"{out}: {quantized} e4m3 matrices with their scales, {kept} tensors as stored, "
          f"marker present; largest error {worst:.3e} of max |w|; metadata {metadata}")


if __name__ == "__main__":
    main()
