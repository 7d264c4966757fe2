"""Host (CPython): the model file a blob was exported from — found beside the blob (or given),
and checked to be the blob's (its classes and input scaling, as float32), so that what the
blob cannot hold (feature names, the label column, the recording's rate) is read from it by
`tinyattn predict` and `tinyattn flash --app`."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tinyattn.errors import CLIError


def blob_model_meta(
    blob, blob_path: Path, model: Path | None = None
) -> tuple[dict | None, str | None]:
    """`(meta, why not)` of the model file the blob was exported from: `model` (--model), by
    default the `.npz` beside the blob. A model file is the blob's when its classes and input
    scaling (as float32) are the blob's. None and a reason when there is no such file; CLIError
    when an explicit --model cannot be used."""
    from tinyattn.learn.model import read_npz

    path = model if model is not None else blob_path.with_suffix(".npz")
    if model is None and not path.is_file():
        return None, f"no model file {path} beside the blob"
    try:
        meta, norm_mean, norm_std, _ = read_npz(path)
    except ValueError as exc:
        if model is not None:
            raise CLIError(str(exc)) from None
        return None, f"{exc}"
    same = (
        list(meta.get("class_names") or []) == list(blob.class_names)
        and np.array_equal(np.asarray(norm_mean, np.float32), blob.norm_mean)
        and np.array_equal(np.asarray(norm_std, np.float32), blob.norm_std)
    )
    if not same:
        what = f"{path} is not the model {blob_path} was exported from"
        if model is not None:
            raise CLIError(f"{what} (other features, classes or input scaling); pass that "
                           "model with --model FILE")  # fmt: skip
        return None, what
    return meta, None
