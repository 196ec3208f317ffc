"""Options that several commands share: `--card`, `--target` and `--device` for running a model,
and `--threads`.

Owns: the `--card` option (`describe`, `gen`, `run`, `eval`: bind this card to the GGUF file
instead of the file's own; a path or a card name, resolve.py's rule) and its check, before
anything is read; `threads_option` (the commands that run a model: run, eval, chat, serve,
train), which sets how many threads the kernels, torch and BLAS compute on, and its default:
`--threads N`, else $OMP_NUM_THREADS, else the physical cores the process may run on
(`default_threads`: a core's second hardware thread shares its load and store units, and the
kernels read memory as fast as the cores let them).
Leaves out: which card a file gets without `--card` (library.card_for_file).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

card_option = click.option(
    "--card",
    "card",
    type=click.Path(),
    default=None,
    metavar="FILE",
    help="Bind this card to the GGUF file instead of its own (embedded, TOYCARDS_CARDS or library).",
)

run_target_option = click.option(  # run and eval (gen has no reference target: no code is generated)
    "--target",
    type=click.Choice(["numpy", "torch", "reference"]),
    default="numpy",
    show_default=True,
    help="reference: the interpreter running the card itself (slow; the definition).",
)


device_option = click.option(  # run and eval
    "--device",
    default=None,
    metavar="DEVICE",
    help="torch target: run there (cuda, cuda:1, mps …), every weight as float32 (no block kernels).",
)


def given_card(arg: str | None) -> str | None:
    """The card file `--card ARG` names (a path, else a card name: resolve.resolve_card); a
    one-line error when it names neither, or a folder."""
    if arg is None:
        return None
    from toycards.cli.resolve import resolve_card

    return str(resolve_card(arg, "--card"))


THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
MAX_THREADS = 1024  # OpenMP aborts the process where it cannot start the threads asked for


def _cpu_topology() -> Path:
    return Path("/sys/devices/system/cpu")


def default_threads(cpus: set[int] | None = None, topology: Path | None = None) -> int:
    """The physical cores among `cpus` (default: the CPUs this process may run on,
    os.sched_getaffinity): one thread per core, however many hardware threads each has.

    Cores are told apart by each CPU's list of hardware-thread siblings (sysfs
    `cpuN/topology/core_cpus_list`, formerly `thread_siblings_list`); where that cannot be read,
    every CPU counts as a core.
    """
    if cpus is None:
        try:
            cpus = os.sched_getaffinity(0)
        except AttributeError:  # no affinity on this system (macOS): every CPU
            return os.cpu_count() or 1
    topology = topology or _cpu_topology()
    cores = set()
    for cpu in cpus:
        for name in ("core_cpus_list", "thread_siblings_list"):
            try:
                cores.add((topology / f"cpu{cpu}" / "topology" / name).read_text().strip())
                break
            except OSError:
                continue
        else:
            return max(len(cpus), 1)
    return max(len(cores), 1)


def use_threads(n: int) -> None:
    """Compute on `n` threads: the variables OpenMP and BLAS read as they load (the kernels,
    torch and NumPy load later in a command), and the runtimes this process has loaded already."""
    for var in THREAD_VARIABLES:
        os.environ[var] = str(n)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(n)
    import ctypes

    try:  # OpenMP already loaded: the kernels share torch's libgomp.so.1 (engine/ckernels.py)
        gomp = ctypes.CDLL("libgomp.so.1", mode=os.RTLD_NOLOAD)
    except (OSError, AttributeError):
        return
    gomp.omp_set_num_threads(ctypes.c_int(n))


def _set_threads(ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
    """`--threads N` everywhere; without it, $OMP_NUM_THREADS, else the default as
    $OMP_NUM_THREADS alone: OpenBLAS and MKL follow it unless their own variables say otherwise,
    and runtimes this process has loaded already keep their own choice."""
    if value is not None:
        use_threads(value)
    elif not os.environ.get("OMP_NUM_THREADS", "").strip():
        os.environ["OMP_NUM_THREADS"] = str(default_threads())
    return value


def _keep_ubatch(ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
    if value is not None:
        ctx.meta["toycards.ubatch"] = value  # cli/running.py load_model sets it on the model
    return value


ubatch_option = click.option(  # run, eval, chat, serve, embed
    "--ubatch",
    type=click.IntRange(1, 1 << 20),
    default=None,
    metavar="N",
    callback=_keep_ubatch,
    expose_value=False,
    help="Run a long input through the model N tokens a pass (default 256): a pass's work memory grows"
    " with N, the KV cache alone with the input.",
)


threads_option = click.option(  # run, eval, chat, serve, train
    "--threads",
    type=click.IntRange(1, MAX_THREADS),
    default=None,
    metavar="N",
    callback=_set_threads,
    expose_value=False,
    help="Compute on N threads. Default: $OMP_NUM_THREADS, else the physical cores this process may run on.",
)
