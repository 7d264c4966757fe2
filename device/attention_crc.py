# Device (MicroPython; also runs unchanged under CPython): CRC-32 for a port without binascii.
"""`crc32(data, crc=0)`: CRC-32 (IEEE, as zlib.crc32 and binascii.crc32) with a 16-entry nibble
table, for a MicroPython port built without `binascii.crc32`. The runtime imports it only
there (attention.py, server_link.py, attention_record.py, attention_trainfile.py,
attention_train_seq.py), so a port that has binascii keeps its bytecode out of the heap."""

_CRC_NIBBLE = (
    0x00000000, 0x1DB71064, 0x3B6E20C8, 0x26D930AC, 0x76DC4190, 0x6B6B51F4, 0x4DB26158,
    0x5005713C, 0xEDB88320, 0xF00F9344, 0xD6D6A3E8, 0xCB61B38C, 0x9B64C2B0, 0x86D3D2D4,
    0xA00AE278, 0xBDBDF21C,
)  # fmt: skip


def crc32(data, crc=0):
    """CRC-32 of a bytes-like object, continuing from `crc` (as binascii.crc32)."""
    crc ^= 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        crc = (crc >> 4) ^ _CRC_NIBBLE[crc & 15]
        crc = (crc >> 4) ^ _CRC_NIBBLE[crc & 15]
    return crc ^ 0xFFFFFFFF
