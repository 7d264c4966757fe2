"""Host (CPython): The integer model: quantization, the blob, the integer and float references,
export. """
