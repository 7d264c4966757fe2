"""Host (CPython): PyTorch twins of our NumPy models, for the oracle tests and `bench_train`.

`SeqAttnTorch` is `seq-attn` (host/learn/seqmodel.py) built from torch modules — `nn.Linear` patch
embedding over `torch.where`-masked, `F.pad`-ed patches, a learned positional `Parameter`,
`x + nn.MultiheadAttention(batch_first=True, key_padding_mask=padded tokens)`,
`x + Linear(relu(Linear(x)))`, a masked mean, `nn.Linear` head — holding a copy of a
`SeqModel`'s weights (float64 by default). `tests/test_seq_oracle_torch.py` checks it against our
layers to <= 1e-10; `tools/bench_train.py` times its training against ours (issue 11,
must-show 7). Importing this module needs PyTorch (`make install-oracle`).
"""

from __future__ import annotations

import numpy as np
import torch

from tinyattn.learn.seqmodel import SeqModel

F = torch.nn.functional


def torch_masks(lengths, T: int, P: int):
    """`(step_ok [B, T], token_ok [B, S])` as torch bools, the definitions of seqlayers.py."""
    lengths = torch.as_tensor(lengths)
    S = -(-T // P)
    step_ok = torch.arange(T)[None, :] < lengths[:, None]
    token_ok = torch.arange(S)[None, :] * P < lengths[:, None]
    return step_ok, token_ok


def torch_patches(x, step_ok, P: int):
    """`[B, T, C] -> [B, S, P·C]`: padded steps zeroed (selected), zero-filled to S·P steps."""
    B, T, C = x.shape
    S = -(-T // P)
    x = torch.where(step_ok[:, :, None], x, torch.zeros((), dtype=x.dtype))
    return F.pad(x, (0, 0, 0, S * P - T)).reshape(B, S, P * C)


def torch_masked_mean(h, token_ok):
    w = token_ok.to(h.dtype)  # (B, S)
    return (h * w[:, :, None]).sum(dim=1) / w.sum(dim=1, keepdim=True)


class SeqAttnTorch(torch.nn.Module):
    """`seq-attn` in PyTorch modules, holding a copy of a `SeqModel`'s weights (`dtype`)."""

    def __init__(self, model: SeqModel, dtype=torch.float64) -> None:
        super().__init__()
        embed, pos, *blocks, _, head = model.layers
        kw = {"dtype": dtype}
        self.patch = embed.patch
        self.embed = torch.nn.Linear(embed.n_in, embed.n_out, **kw)
        self.pos = torch.nn.Parameter(torch.tensor(pos.pos, **kw))
        self.attn = torch.nn.ModuleList()
        self.ff = torch.nn.ModuleList()
        for attn, ff in zip(blocks[::2], blocks[1::2], strict=True):
            self.attn.append(
                torch.nn.MultiheadAttention(attn.embed_dim, attn.num_heads, batch_first=True, **kw)
            )
            self.ff.append(
                torch.nn.Sequential(
                    torch.nn.Linear(ff.embed_dim, ff.hidden, **kw),
                    torch.nn.ReLU(),
                    torch.nn.Linear(ff.hidden, ff.embed_dim, **kw),
                )
            )
        self.head = torch.nn.Linear(head.n_in, head.n_out, **kw)
        pairs = [(self.embed.weight, embed.W), (self.embed.bias, embed.b)]
        for t_attn, t_ff, attn, ff in zip(
            self.attn, self.ff, blocks[::2], blocks[1::2], strict=True
        ):
            pairs += [
                (t_attn.in_proj_weight, attn.Wqkv), (t_attn.in_proj_bias, attn.bqkv),
                (t_attn.out_proj.weight, attn.Wo), (t_attn.out_proj.bias, attn.bo),
                (t_ff[0].weight, ff.W1), (t_ff[0].bias, ff.b1),
                (t_ff[2].weight, ff.W2), (t_ff[2].bias, ff.b2),
            ]  # fmt: skip
        pairs += [(self.head.weight, head.W), (self.head.bias, head.b)]
        with torch.no_grad():
            for dst, src in pairs:
                dst.copy_(torch.from_numpy(np.asarray(src, dtype=np.float64)).to(dtype))

    def forward(self, x, lengths):
        B, T, _ = x.shape
        step_ok, token_ok = torch_masks(lengths, T, self.patch)
        h = self.embed(torch_patches(x, step_ok, self.patch)) + self.pos[: token_ok.shape[1]]
        for attn, ff in zip(self.attn, self.ff, strict=True):
            a, _ = attn(h, h, h, key_padding_mask=~token_ok, need_weights=False)
            h = h + a
            h = h + ff(h)
        return self.head(torch_masked_mean(h, token_ok))  # (B, classes)

    def named_tensors(self, grads: bool = False) -> dict[str, np.ndarray]:
        """Parameters (or, with `grads`, their gradients) under `SeqModel.named_parameters()`
        names, as float64 NumPy arrays."""

        def get(p):
            return p.grad if grads else p.detach()

        out = {"embed.W": get(self.embed.weight), "embed.b": get(self.embed.bias),
               "pos": get(self.pos)}  # fmt: skip
        for j, (attn, ff) in enumerate(zip(self.attn, self.ff, strict=True)):
            E = attn.embed_dim
            for i, n in enumerate("qkv"):
                out[f"block{j}.attn.W{n}"] = get(attn.in_proj_weight)[i * E : (i + 1) * E]
                out[f"block{j}.attn.b{n}"] = get(attn.in_proj_bias)[i * E : (i + 1) * E]
            out[f"block{j}.attn.Wo"] = get(attn.out_proj.weight)
            out[f"block{j}.attn.bo"] = get(attn.out_proj.bias)
            out[f"block{j}.ff.W1"], out[f"block{j}.ff.b1"] = get(ff[0].weight), get(ff[0].bias)
            out[f"block{j}.ff.W2"], out[f"block{j}.ff.b2"] = get(ff[2].weight), get(ff[2].bias)
        out["head.W"], out["head.b"] = get(self.head.weight), get(self.head.bias)
        return {k: v.double().numpy() for k, v in out.items()}

    def named_grads(self) -> dict[str, np.ndarray]:
        """Gradients under `SeqModel.named_parameters()` names."""
        return self.named_tensors(grads=True)
