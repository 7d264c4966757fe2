"""tinyattn host package (CPython + NumPy): layers, training, quantization, blob, serial."""
