"""tinyattn host package (CPython + NumPy): layers, training, quantization, blob, serial.

`tinyattn.TinyAttnClassifier` is the Python API (scikit-learn's convention, docs/api.md),
imported on first use so that `import tinyattn` (and every command) stays as quick as before.
"""

__all__ = ["TinyAttnClassifier"]


def __getattr__(name: str):
    if name == "TinyAttnClassifier":
        from tinyattn.estimator import TinyAttnClassifier

        return TinyAttnClassifier
    raise AttributeError(f"module 'tinyattn' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
