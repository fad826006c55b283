"""Time applying a packed token bitmask to a batch of logits, on the CPU or a GPU.

A server's step is: fill the bitmask on the CPU (the matcher's job, `bench/run.py`), then set
the disallowed logits to -inf on the device that holds them. This script measures the second
half from a CPU bitmask, the transfer included, for gramkiln's `apply_token_bitmask_inplace`
and, when they are installed, xgrammar's and llguidance's (each given the CPU bitmask and left
to move it, or moved by the script first where the engine wants it on the logits' device). A
`dense` row is the way gramkiln did it before: unpack to a bool mask on the CPU and move that.

Every engine's result is first checked against a bit-by-bit numpy reference on random masks
(sign bits set, a ragged last word), then timed: the median and p90 of `--repeats` calls, the
device synchronised around each call. Ratios are gramkiln's median over each peer's.

Usage::

    python bench/apply_mask.py                          # cuda when torch sees one, else cpu
    python bench/apply_mask.py --device cpu --batch 1,16 --dtype float32
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from gramkiln import apply_token_bitmask_inplace

LLAMA3_VOCAB = 128_256

Applier = Callable[[Any, Any], None]


def reference_masked(logits: np.ndarray, bitmask: np.ndarray) -> np.ndarray:
    """`logits` (float32, [batch, vocab]) with -inf where `bitmask` has no bit, bit by bit."""
    vocab = logits.shape[1]
    token = np.arange(vocab)
    words = bitmask.astype(np.int64) & 0xFFFFFFFF
    allowed = (words[:, token // 32] >> (token % 32)) & 1
    return np.where(allowed == 1, logits, -np.inf).astype(np.float32)


def dense_apply(logits: Any, bitmask: Any) -> None:
    """The pre-session-39 torch path: a dense bool mask made on the CPU, then moved."""
    import torch

    mask = bitmask.numpy() if hasattr(bitmask, "numpy") else bitmask
    bits = np.unpackbits(mask.view(np.uint8).reshape(mask.shape[0], -1), axis=1, bitorder="little")
    disallowed = torch.from_numpy(bits[:, : logits.shape[1]] == 0).to(logits.device)
    logits.masked_fill_(disallowed, float("-inf"))


def peer_appliers(device: str) -> dict[str, Applier]:
    """The appliers of the installed peers, each taking (logits, CPU int32 torch bitmask)."""
    appliers: dict[str, Applier] = {}
    try:
        import xgrammar

        def xgrammar_apply(logits: Any, bitmask: Any) -> None:
            xgrammar.apply_token_bitmask_inplace(logits, bitmask.to(logits.device))

        appliers["xgrammar"] = xgrammar_apply
    except Exception as error:  # noqa: BLE001 - a peer that does not import is left out
        print(f"xgrammar left out: {type(error).__name__}: {error}")
    try:
        import llguidance.torch

        def llguidance_apply(logits: Any, bitmask: Any) -> None:
            llguidance.torch.apply_token_bitmask_inplace(logits, bitmask.to(logits.device))

        appliers["llguidance"] = llguidance_apply
    except Exception as error:  # noqa: BLE001
        print(f"llguidance left out: {type(error).__name__}: {error}")
    return appliers


def check_agreement(name: str, applier: Applier, device: str, vocab: int) -> bool:
    """Whether `applier` masks random float32 logits exactly as the numpy reference does."""
    import torch

    generator = np.random.default_rng(7)
    words = (vocab + 31) // 32
    bitmask = generator.integers(-(2**31), 2**31, size=(4, words), dtype=np.int64)
    bitmask = bitmask.astype(np.int32)
    logits = generator.standard_normal((4, vocab)).astype(np.float32)
    expected = reference_masked(logits, bitmask)
    on_device = torch.from_numpy(logits.copy()).to(device)
    try:
        applier(on_device, torch.from_numpy(bitmask))
    except Exception as error:  # noqa: BLE001 - reported, the engine is then left out
        print(f"{name}: failed on the agreement check: {type(error).__name__}: {error}")
        return False
    agrees = bool(np.array_equal(on_device.cpu().numpy(), expected))
    if not agrees:
        print(f"{name}: DISAGREES with the bit-by-bit reference")
    return agrees


def time_applier(
    applier: Applier, device: str, batch: int, vocab: int, dtype: Any, repeats: int
) -> list[float]:
    """Microseconds of each of `repeats` calls on [batch, vocab] logits from a CPU bitmask."""
    import torch

    generator = np.random.default_rng(batch)
    words = (vocab + 31) // 32
    bitmask = torch.from_numpy(
        generator.integers(-(2**31), 2**31, size=(batch, words), dtype=np.int64).astype(np.int32)
    )
    logits = torch.randn((batch, vocab), dtype=dtype, device=device)
    synchronize = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    for _ in range(max(3, repeats // 10)):  # warm-up: kernel compilation, caches
        applier(logits, bitmask)
    synchronize()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        applier(logits, bitmask)
        synchronize()
        times.append((time.perf_counter() - start) * 1e6)
    return times


def percentile(values: Sequence[float], q: float) -> float:
    """The `q`th percentile of `values`."""
    return float(np.percentile(np.asarray(values), q))


def main(argv: Sequence[str] | None = None) -> None:
    """Check every applier, then print a table of times and ratios per batch size and dtype."""
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch", default="1,16,64", help="comma-separated batch sizes")
    parser.add_argument("--vocab", type=int, default=LLAMA3_VOCAB)
    parser.add_argument("--dtype", default="bfloat16,float32", help="comma-separated")
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args(argv)

    appliers: dict[str, Applier] = {
        "gramkiln": apply_token_bitmask_inplace,
        "dense": dense_apply,
    }
    appliers.update(peer_appliers(args.device))
    device_name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    print(f"device {args.device} ({device_name}), torch {torch.__version__}, vocab {args.vocab}")
    appliers = {
        name: applier
        for name, applier in appliers.items()
        if check_agreement(name, applier, args.device, args.vocab)
    }
    print(f"agree with the bit-by-bit reference: {', '.join(appliers)}")
    header = (
        f"{'batch':>5} {'dtype':>9} {'engine':>11} {'p50 us':>9} {'p90 us':>9} {'gramkiln/x':>10}"
    )
    print(header)
    for dtype_name in args.dtype.split(","):
        dtype = getattr(torch, dtype_name)
        for batch in (int(value) for value in args.batch.split(",")):
            medians: dict[str, float] = {}
            for name, applier in appliers.items():
                times = time_applier(applier, args.device, batch, args.vocab, dtype, args.repeats)
                medians[name] = statistics.median(times)
                ratio = medians["gramkiln"] / medians[name] if "gramkiln" in medians else 1.0
                print(
                    f"{batch:>5} {dtype_name:>9} {name:>11} {medians[name]:>9.1f} "
                    f"{percentile(times, 90):>9.1f} {ratio:>10.2f}"
                )


if __name__ == "__main__":
    main()
