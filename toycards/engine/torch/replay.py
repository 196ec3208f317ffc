"""A decoding step of the torch target as one C++ call: the step's kernel calls, recorded once, replayed
for the tokens after it.

Owns: when a decoding step is recorded (kernels/glue.cpp's tape), what a replay takes from Python (the
ids; RoPE's angles and the mask of each attention site at the new positions, made by the site's own
code; the cache's slots), the watch over everything else the recorded step does, and the check that
adopts a tape only once its replay of the recorded step has given the forward pass's logits bit for bit.
Leaves out: the kernels and the recording of each call (glue.cpp), the forward pass (generated).

Why: a decoding step makes several kernel calls a layer, and on a small model the Python between
them (the generated forward pass, the ops, the glue's checks) is a large share of the step.
Replayed, the step is its kernels, RoPE's angles and the mask.
`TOYCARDS_REPLAY=off` in one of two otherwise equal runs of `bench/vs_llama_cpp.py` measures it.

When a replay computes what the card's code computes: the tape holds every call that read an
activation (an output of a recorded call, or the ids), each reading only recorded outputs and the
model's weights (glue.cpp refuses any other input), and the watch below refuses a recording in which
anything else read or wrote an activation: a torch operation other than those the tape takes (a sum
or product of two tensors, a product or quotient by a number, in float32 as torch computes them;
GELU, tanh, SiLU and LayerNorm, which the replay calls torch for) or a view; an in-place write; a
conversion to a Python number; a pointer to it taken in Python (for a kernel that glue.cpp does not
call; one that writes in place says so itself too: engine.torch.glue.silu_mul). The positions reach the step only through `runtime.positions`, and each
read of them must be an attention site's (whose angles and mask the replay remakes at the new
positions); the weights' plans must be those recorded (or refreshed after packing). Whatever fails
these leaves the step to the forward pass, which then runs as always. A model whose recordings are
refused twice stops recording (`replay_why` says why).
"""

from __future__ import annotations

import os

import torch
from torch.overrides import TorchFunctionMode

from toycards.engine.torch import native, quant
from toycards.runtime import context

SWITCH = "TOYCARDS_REPLAY"  # "off": every decoding step runs the forward pass
KEY = "torch replay"  # the tape's key in KVCache.prepared
TRIES = 2  # recordings a model may have refused before it stops recording

# what may read an activation, besides the recorded calls: what a tensor says of itself
_ABOUT = frozenset(
    ("__get__", "dim", "size", "stride", "numel", "is_contiguous", "is_floating_point",
     "element_size", "storage_offset", "__len__", "ndimension", "nelement", "get_device", "__hash__")
)  # fmt: skip
_ADDS = frozenset(("add", "__add__", "__radd__"))
_MULS = frozenset(("mul", "__mul__", "__rmul__"))
_DIVS = frozenset(("div", "__truediv__"))


class _Tape:
    """A cache's recorded step: glue.cpp's tape, its attention sites (what a site's angles and mask
    are made of: ρ, θ, the layout, the mask, and the angles' width), the shape of the ids it replays,
    its `last`, its model, the weights' plans it holds (engine/torch/quant.py's count), and how many steps it
    has replayed."""

    __slots__ = ("tape", "sites", "shape", "last", "model", "plans", "replays")

    def __init__(self, tape, sites, shape, last, model) -> None:
        self.tape, self.sites, self.shape, self.last, self.model = tape, sites, shape, last, model
        self.plans = quant.plans_adopted
        self.replays = 0


def on() -> bool:
    return os.environ.get(SWITCH, "").strip().lower() != "off"


def step(model, forward, x, cache, last, ops):
    """Logits of one decoding step (`forward(x, cache, last)`, the model's forward pass): the cache's
    tape replayed where it fits, else the forward pass, recorded where the model may be replayed."""
    cx = native.module()
    if cx is None or cache is None or x.shape[-1] != 1 or torch.is_grad_enabled():
        return forward(x, cache, last)
    kept = cache.prepared.get(KEY)
    if kept is not None:
        out = _replayed(cx, kept, model, x, cache, last, ops)
        if out is not None:
            kept.replays += 1
            return out
        del cache.prepared[KEY]
        if kept.replays == 0 and _room(cache, x.shape[-1]):  # a tape that fitted no step: a try spent
            model._replay_tries -= 1  # (so that a model's steps cannot all be recordings)
            model.replay_why = "a recorded step did not fit the next one"
    if model._replay_tries <= 0 or not on():  # (a tape exists only where it was on)
        return forward(x, cache, last)
    return _record(cx, model, forward, x, cache, last, ops)


def _room(cache, T: int) -> bool:
    """Every slot's buffers have room for T more rows (else a tape goes as the cache grows)."""
    return all(b is not None and entry[1] + T <= b.shape[-2] for entry in cache.slots for b in entry[0])


def _replayed(cx, kept: _Tape, model, x, cache, last, ops):
    """The tape replayed for ids x, or None where it does not fit them (nothing written then)."""
    if kept.model is not model or kept.last != last or kept.shape != x.shape:
        return None
    if kept.plans != quant.plans_adopted:  # weights packed since: read them packed
        if not cx.tape_refresh(kept.tape):
            return None
        kept.plans = quant.plans_adopted
    T = x.shape[-1]
    t = context.Context.positions_after(cache.length, T, ops)
    sites = []
    for rho, theta, layout, mask, half in kept.sites:
        now = ops._GQASite(rho, t, theta, layout, mask)
        cos, sin = now.angles(2 * half)
        # a sliding window's slots hold the tokens after `first` alone (KVCache.begin_pass)
        window = getattr(mask, "window", None)
        first = context.reached_from(cache.length, window) if window is not None else 0
        mask = now.allowed(cache.length + T - first, first)
        if mask is None:
            return None
        sites.append((cos, sin, mask))
    return cx.replay(kept.tape, x.contiguous(), tuple(sites), cache.slots)


def _record(cx, model, forward, x, cache, last, ops):
    """The forward pass, recorded, then replayed at once for the same ids and positions (writing the
    same cache rows again): its tape kept in the cache where the two logits are equal bit for bit,
    else why not in `model.replay_why` (and one try fewer)."""
    x = x.clone(memory_format=torch.contiguous_format)  # the tape's own: replays write their ids there
    before = [entry[1] for entry in cache.slots]
    reads = []
    positions = context.positions

    def read(ctx, n):  # the generated code's one way to the positions
        t = positions(ctx, n)
        reads.append(t)
        return t

    if not cx.record(x):  # another thread is recording a step
        return forward(x, cache, last)
    global _recording
    context.positions = read
    _recording = True
    try:
        with _Watch(cx):
            out = forward(x, cache, last)
    except BaseException:
        cx.recorded(None)
        raise
    finally:
        context.positions = positions
        _recording = False
    tape = cx.recorded(out)
    if isinstance(tape, str):
        return _refused(model, tape, out)
    sites, calls = cx.tape_info(tape)
    if len(reads) != calls or not all(any(site.t is r for r in reads) for site, _ in sites):
        return _refused(model, "the positions were read other than by attention", out)
    if calls != len(cache.slots):
        return _refused(model, "the cache holds other arrays than the attention's keys and values", out)
    sites = tuple((site.rho, site.theta, site.layout, site.mask, half) for site, half in sites)  # (not the
    # sites themselves: a site holds its pass's context, and so the cache, which would hold itself)
    out = out.clone()  # (each replay writes over the tape's own)
    started = before + [0] * (len(cache.slots) - len(before))  # (slots this step made held no rows)
    kept = _Tape(tape, sites, x.shape, last, model)
    for entry, used in zip(cache.slots, started, strict=True):
        entry[1] = used  # the rows this step wrote, written again by the replay
    again = _replayed(cx, kept, model, x, cache, last, ops)
    if again is not None and torch.equal(out.view(torch.int32), again.view(torch.int32)):  # (NaN too)
        cache.prepared[KEY] = kept
        return out
    for entry, used in zip(cache.slots, started, strict=True):
        entry[1] = used
    out = forward(x, cache, last)  # the step's rows as the forward pass writes them
    return _refused(model, "a replayed step differed from the forward pass", out, tries=0)


def constant(value) -> None:
    """A value of the card that follows from its hyperparameters alone, made once per model
    (TorchModel.constant): where a step is being recorded, the tape keeps it as it keeps its calls'
    outputs, and a recorded call may read it (the same tensor at every later step, never written)."""
    if _recording and isinstance(value, torch.Tensor):
        cx = native.module()
        if cx is not None:
            cx.tape_constant(value)


_recording = False  # a step is being recorded (on some thread: glue.cpp's own state says which)


def _refused(model, why: str, out, tries: int | None = None):
    """`out`, the step's logits, from a model whose recording was refused for `why`: one try fewer, or
    `tries` left."""
    model._replay_tries = model._replay_tries - 1 if tries is None else tries
    model.replay_why = why
    return out


def _by_number(name, args, kwargs):
    """(x, c) of `x · c`, `c · x` or `x / c` for a tensor x and a Python number c, else None."""
    if kwargs or len(args) != 2 or (name not in _MULS and name not in _DIVS):
        return None
    x, c = args if isinstance(args[0], torch.Tensor) else args[::-1]
    plain = isinstance(c, (int, float)) and not isinstance(c, bool)
    if not plain or not isinstance(x, torch.Tensor) or (name in _DIVS and x is not args[0]):
        return None
    return x, c


def _operator(name, args, kwargs, out):
    """glue.cpp's tape_op arguments for the torch operators the tape calls itself, else None: GELU
    (either form), tanh (soft caps), SiLU (a gate outside SwiGLU: Phi-3's), LayerNorm over the last
    axis."""
    if not isinstance(out, torch.Tensor) or not args or not isinstance(args[0], torch.Tensor):
        return None
    x = args[0]
    if name == "gelu" and len(args) == 1 and set(kwargs) <= {"approximate"}:
        return "gelu", out, x, kwargs.get("approximate", "none")
    if name in ("tanh", "silu") and len(args) == 1 and not any(kwargs.values()):  # (F.silu's inplace=False)
        return name, out, x
    if name == "layer_norm":
        call = dict(zip(("normalized_shape", "weight", "bias", "eps"), args[1:], strict=False), **kwargs)
        if set(call) <= {"normalized_shape", "weight", "bias", "eps"} and tuple(call["normalized_shape"]) == (
            x.shape[-1],
        ):
            return "layer_norm", out, x, call.get("weight"), call.get("bias"), float(call.get("eps", 1e-5))
    return None


def _tensors(values):
    for v in values:
        if isinstance(v, torch.Tensor):
            yield v
        elif isinstance(v, (list, tuple)):
            yield from _tensors(v)
        elif isinstance(v, dict):
            yield from _tensors(v.values())


class _Watch(TorchFunctionMode):
    """While a step is recorded: each torch operation that reads an activation (a recorded call's
    output, or the ids) is one the tape takes (a residual, a bias, a gate, a multiplier, GELU,
    LayerNorm), a view of it, or a question about its shape; anything else spoils the recording."""

    def __init__(self, cx) -> None:
        super().__init__()
        self.cx = cx

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not any(self.cx.taped(t) for t in _tensors((args, kwargs))):
            return func(*args, **kwargs)
        name = getattr(func, "__name__", "")
        writes = name == "__setitem__" or (name.startswith("__i") and name.endswith("__"))
        writes = writes or (name.endswith("_") and not name.startswith("__")) or "out" in kwargs
        if writes or kwargs.get("inplace"):
            self.cx.spoil(f"torch's {name} wrote to an activation")
            return func(*args, **kwargs)
        out = func(*args, **kwargs)
        two = len(args) == 2 and not kwargs and all(isinstance(a, torch.Tensor) for a in args)
        if two and (name in _ADDS or name in _MULS):
            self.cx.tape_add(
                args[0], args[1], out, name in _MULS
            )  # (it spoils the recording where it cannot)
        elif (number := _by_number(name, args, kwargs)) is not None:
            self.cx.tape_scale(*number, out, name in _DIVS)
        elif (op := _operator(name, args, kwargs, out)) is not None:
            self.cx.tape_op(*op)
        elif made := list(_tensors((out,))):
            if not all(self.cx.taped(t) for t in made):  # (a view shares its memory)
                self.cx.spoil(f"torch's {name} computed from an activation")
        elif name not in _ABOUT:
            self.cx.spoil(f"torch's {name} read an activation")
        return out
