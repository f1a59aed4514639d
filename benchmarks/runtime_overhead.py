"""The run-time watcher's overhead on a CPU training step of a small model (docs/runtime.md).

    python benchmarks/runtime_overhead.py [--steps 200] [--rounds 7] [--dtype bfloat16|float16]

One step: zero_grad, a forward under autocast (a small MLP, batch 64), the loss, backward and the optimizer step,
through a GradScaler for float16 (its step, update and a clip after unscale_), without one for bfloat16. Rounds
alternate plain and watched (`amplint.runtime.watch()`) blocks of --steps steps; each kind's time is its median
round. No fp32 island is open, so no TorchFunctionMode is pushed: the watcher's cheap path. Wall-clock time on this
machine as it is; say whether other work was running when you quote the figure.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from torch import nn  # noqa: E402

from amplint.runtime import watch  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--dtype", choices=("bfloat16", "float16"), default="bfloat16")
    options = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    dtype = getattr(torch, options.dtype)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cpu") if dtype == torch.float16 else None
    inputs, targets = torch.randn(64, 64), torch.randint(0, 10, (64,))

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=dtype):
            loss = nn.functional.cross_entropy(model(inputs), targets)
        if scaler is None:
            loss.backward()
            optimizer.step()
        else:
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()

    def block() -> float:
        start = time.perf_counter()
        for _ in range(options.steps):
            step()
        return time.perf_counter() - start

    for _ in range(20):
        step()  # warm-up
    plain, watched = [], []
    for _ in range(options.rounds):
        plain.append(block())
        with watch() as report:
            watched.append(block())
        assert not report.findings, report.findings
    base, under = statistics.median(plain), statistics.median(watched)
    print(f"{options.dtype}: {1e6 * base / options.steps:.0f} us/step plain, {1e6 * under / options.steps:.0f} "
          f"us/step watched: overhead {100 * (under / base - 1):+.1f}% (median of {options.rounds} rounds of "
          f"{options.steps} steps)")


if __name__ == "__main__":
    main()
