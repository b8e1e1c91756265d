"""A plain window-by-window RAN, written straight from the authors' computation: the oracle of the tests and benchmarks.

One document at a time, one window at a time, no batching, no grid, no SDPA: the fast path of `ran_hf` must agree
with this on every config. It reads the weights of a `RANModel` but none of its code paths.
"""

import math

import torch
import torch.nn.functional as F


def norm(x, module, eps):
    mean = x.mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * module.weight + module.bias


def sn(x, eps):
    mean = x.mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)


def glu(x, module):
    t, g = F.linear(x, module.proj.weight, module.proj.bias).chunk(2, -1)
    return t * torch.sigmoid(g)


def act(x):
    return x * torch.sigmoid(x)


def rotate(x, theta):
    """x: (T, H, d) at positions 0..T-1, half-split pairs."""
    T, _, d = x.shape
    inv = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    ang = torch.arange(T, dtype=torch.float64, device=x.device)[:, None] * inv[None]
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1).to(x), torch.cat([ang.sin(), ang.sin()], -1).to(x)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos[:, None] + torch.cat([-x2, x1], -1) * sin[:, None]


def split_windows(length, window, min_window):
    """Authors' split of one document of `length` tokens: list of (start, end)."""
    if length <= window:
        return [(0, length)]
    n = -(-length // window)
    bounds = [(i * window, (i + 1) * window) for i in range(n - 1)]
    last = (bounds[-1][1], length)
    if last[1] - last[0] < min_window:
        bounds[-1] = (bounds[-1][0], length)
    else:
        bounds.append(last)
    return bounds


def window_step(layer, config, s, x):
    """One window: s (D,), x (T, D) -> new cell candidate c (D,), token outputs y (T, D)."""
    eps = config.layer_norm_eps
    att = layer.window_block
    H, d = config.num_attention_heads, config.attention_head_size
    z = norm(torch.cat([s[None], x], 0), att.input_norm, eps)
    qkv = act(F.linear(z, att.qkv.weight, att.qkv.bias)).reshape(len(z), 3, H, d)
    q, k, v = qkv[:, 0], qkv[:, 1], qkv[:, 2]
    if config.use_rotary:
        q, k = rotate(q, config.rope_theta), rotate(k, config.rope_theta)
    scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(d)
    o = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).reshape(len(z), H * d)
    o = act(F.linear(o, att.o.weight, att.o.bias))
    out = sn(norm(o + glu(z, att.glu), att.norm, eps), eps)
    return out[0], out[1:]


def layer_forward(layer, config, x, cell):
    """One RAN layer over one document x (L, D). Returns token outputs (L, D), last cell (D,), history (n, D)."""
    eps = config.layer_norm_eps
    if cell is None or bool((cell == 0).all()):
        base = torch.zeros(config.hidden_size, dtype=x.dtype, device=x.device) if cell is None else cell
        s = norm(act(F.linear(base, layer.cell_initializer.weight)), layer.cell_initializer_norm, eps)
    else:
        s = cell
    ys, history, previous = [], [], None
    for i, (start, end) in enumerate(split_windows(len(x), config.window_size, config.min_window_size)):
        c, y = window_step(layer, config, s, x[start:end])
        if i == 0 or not config.use_cell_residual:
            s = c
        else:
            s = norm(c + glu(previous, layer.cell_glu), layer.cell_residual_norm, eps)
        previous = c
        ys.append(y)
        history.append(c)
    y = torch.cat(ys, 0)
    cells = torch.stack(history, 0)
    if config.use_memory_review:
        mr = layer.memory_review
        qw = act(F.linear(y, mr.q.weight, mr.q.bias))
        kw, vw = act(F.linear(cells, mr.kv.weight, mr.kv.bias)).chunk(2, -1)
        a = (qw @ kw.T / math.sqrt(config.hidden_size)).softmax(-1)
        o = act(F.linear(a @ vw, mr.o.weight, mr.o.bias))
        out = o + glu(qw, mr.glu)
        if config.memory_review_residual:
            out = out + y
        out = norm(out, mr.norm, eps)
    else:
        out = norm(y, layer.output_norm, eps)
    return out, s, cells


@torch.no_grad()
def encode(model, ids=None, embeds=None, initial_cell=None):
    """Encode ONE document (ids (L,) or embeds (L, D)) with a RANModel's weights, window by window.

    Returns dict(last_hidden_state (L, D), last_cell (D,), cells (n, D), pooler_output (D,))."""
    config = model.config
    x = model.embeddings.word_embeddings.weight[ids] if embeds is None else embeds
    h = norm(x, model.embeddings.norm, config.layer_norm_eps)
    cell = initial_cell
    for layer in model.layers:
        h, cell, cells = layer_forward(layer, config, h, cell)
    if config.cell_pooling == "mean":
        pooled_cell = cells.mean(0)
    elif config.cell_pooling == "max":
        pooled_cell = cells.max(0).values
    else:
        pooled_cell = cell
    out = dict(last_hidden_state=h, last_cell=pooled_cell, cells=cells)
    pooler = model.pooler
    if pooler is not None:
        if config.pooler_mode == "token_mean":
            out["pooler_output"] = h.mean(0)
        else:
            tokens = h.max(0).values if config.pooler_mode == "cell_max" else h.mean(0)
            t = act(F.linear(pooled_cell, pooler.cell_dense.weight, pooler.cell_dense.bias))
            out["pooler_output"] = glu(t, pooler.cell_glu) + F.linear(tokens, pooler.pooling_dense.weight,
                                                                       pooler.pooling_dense.bias)
    return out


# ----------------------------------------------------------------------------------------------------------------------
# The `"bert"` window block (a pretrained encoder's layers inside RAN), one document and one window at a time
# ----------------------------------------------------------------------------------------------------------------------


def layer_norm(x, module):
    return F.layer_norm(x, x.shape[-1:], module.weight, module.bias, module.eps)


def encoder_window_step(layer, config, s, x):
    """One window of the `"bert"` block: s (D,), x (T, D) -> cell c (D,), token outputs (T, D). The token rows mix
    the encoder's own attention over the window and the joint attention over `[cell; window]` by the gate,
    `(1 - g) P_window V + g P_joint V` (the model computes the same weights another way)."""
    block = layer.window_block
    H, d = config.num_attention_heads, config.attention_head_size
    rows = torch.cat([s[None], x], 0)
    q, k, v = (F.linear(rows, lin.weight, lin.bias).reshape(len(rows), H, d)
               for lin in (block.query, block.key, block.value))
    scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(d)
    joint = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v)
    window = torch.einsum("hqk,khd->qhd", scores[:, :, 1:].softmax(-1), v[1:])
    gate = torch.tanh(block.cell_gate)[None, :, None]
    attended = torch.cat([joint[:1], window[1:] + gate * (joint[1:] - window[1:])], 0).reshape(len(rows), H * d)
    hidden = layer_norm(F.linear(attended, block.attention_output.weight, block.attention_output.bias) + rows,
                        block.attention_norm)
    feed = F.linear(F.gelu(F.linear(hidden, block.intermediate.weight, block.intermediate.bias)),
                    block.output.weight, block.output.bias)
    out = layer_norm(feed + hidden, block.output_norm)
    return out[0], out[1:]


def encoder_layer_forward(layer, config, x, cell):
    """One RAN layer with the `"bert"` block over one document x (L, D): token outputs (L, D), last cell (D,)."""
    eps = config.layer_norm_eps
    if cell is None:
        zero = torch.zeros(config.hidden_size, dtype=x.dtype, device=x.device)
        s = norm(F.gelu(F.linear(zero, layer.cell_initializer.weight)), layer.cell_initializer_norm, eps)
    else:
        s = cell
    ys, cells, previous = [], [], None
    for i, (start, end) in enumerate(split_windows(len(x), config.window_size, config.min_window_size)):
        c, y = encoder_window_step(layer, config, s, x[start:end])
        use_residual = config.use_cell_residual and i > 0
        s = norm(c + glu(previous, layer.cell_glu), layer.cell_residual_norm, eps) if use_residual else c
        previous = c
        ys.append(y)
        cells.append(c)
    y, cells = torch.cat(ys, 0), torch.stack(cells, 0)
    if config.use_memory_review:
        review = layer.memory_review
        keys, values = F.linear(cells, review.kv.weight, review.kv.bias).chunk(2, -1)
        query = F.linear(y, review.q.weight, review.q.bias)
        read = (query @ keys.T / math.sqrt(config.hidden_size)).softmax(-1) @ values
        y = y + torch.tanh(review.gate) * F.linear(read, review.o.weight, review.o.bias)
    return y, s


def encode_with_encoder_block(model, ids):
    """The token states (L, D) of ONE document ids (L,) through a `"bert"`-block RANModel's weights, window by
    window: BERT's embeddings with positions counted from each window's start, then the layers. Differentiable (the
    tests compare gradients with it)."""
    config = model.config
    embeddings = model.embeddings
    bounds = split_windows(len(ids), config.window_size, config.min_window_size)
    positions = torch.cat([torch.arange(end - start, device=ids.device) for start, end in bounds])
    h = layer_norm(embeddings.word_embeddings.weight[ids] + embeddings.position_embeddings.weight[positions]
                   + embeddings.token_type_embeddings.weight[0], embeddings.norm)
    cell = None
    for layer in model.layers:
        h, cell = encoder_layer_forward(layer, config, h, cell)
    return h
