"""An independent safetensors reader (Python standard library only: there is
no pip registry here, so not the safetensors package itself) that checks a
file the way the reference implementation does, and optionally one tensor's
shape and values.

usage: safetensors_check.py FILE [TENSOR SHAPE VALUES]
  SHAPE and VALUES are comma-separated; values are compared as float32."""
import json
import struct
import sys

SIZES = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8, "I64": 8, "I32": 4, "U32": 4, "U8": 1}


def load(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    buf = data[8 + n:]
    tensors = {k: v for k, v in header.items() if k != "__metadata__"}
    spans = sorted((v["data_offsets"][0], v["data_offsets"][1], k) for k, v in tensors.items())
    at = 0
    for begin, end, name in spans:
        assert begin == at, f"{name}: starts at {begin}, expected {at}"
        t = tensors[name]
        count = 1
        for d in t["shape"]:
            count *= d
        assert end - begin == count * SIZES[t["dtype"]], f"{name}: size does not match its shape"
        at = end
    assert at == len(buf), "the tensors do not cover the data buffer"
    return header, buf


def main():
    header, buf = load(sys.argv[1])
    if len(sys.argv) > 2:
        name, shape, values = sys.argv[2], sys.argv[3], sys.argv[4]
        t = header[name]
        assert t["shape"] == [int(x) for x in shape.split(",")], f"shape {t['shape']}"
        assert t["dtype"] == "F32"
        begin, end = t["data_offsets"]
        got = struct.unpack(f"<{(end - begin) // 4}f", buf[begin:end])
        want = [float(x) for x in values.split(",")]
        assert list(got) == want, f"values {got}"
    print(f"{sys.argv[1]}: valid safetensors, {len(header) - ('__metadata__' in header)} tensors")


if __name__ == "__main__":
    main()
