"""One command for a lent GPU: devices, MFU in both compute dtypes, save overlap, tiny_moe training.

    python scripts/gpu_check.py --json $OUT/gpu_check.json     # on the GPU machine (~8 minutes at most)
    python scripts/gpu_check.py --smoke --json /tmp/gpu.json    # the same on a CPU, tiny presets (tests)

Parts, in order, each timed and each recorded even when another fails (a GPU minute is precious):
  tiny_moe       the train step of experiments/tiny_moe.py (its download, dedup and tokenize steps first),
                 run by the executor's library API with the inline runner (no Ray on the GPU image), in
                 a child process that has the device to itself; steps, losses, tokens/s from metrics.jsonl
  devices        jax version, backend, every device
  mfu_float32    scripts/bench/bench_gpu_mfu.py on the medium preset (tiny in --smoke), batch halved until
  mfu_bfloat16   the compiled step fits the device's memory: tokens/s, MFU = flops_per_token x tokens/s /
                 peak (the formula and the peak are in the JSON), compiled memory of each batch tried;
                 bfloat16 uses cuDNN's fused attention, and XLA's if cuDNN refuses (its error is kept;
                 --smoke asks for cuDNN's kernel by name, so on a CPU the refusal and the fallback run)
  save_overlap   scripts/bench/bench_checkpoint_overlap.py: step time with and without a save in flight
Every figure goes to one JSON file (--json), rewritten after each part (a run cut short by a time limit
keeps what it measured); one line per part is printed. Needs neither Ray nor draccus.
Exit status 0 when every part succeeded, 1 otherwise.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts" / "bench"))

import jax  # noqa: E402

import bench_checkpoint_overlap  # noqa: E402
import bench_gpu_mfu  # noqa: E402

CHILD_TIMEOUT_S = 360


def devices() -> dict:
    return {"jax": jax.__version__, "python": platform.python_version(), "backend": jax.default_backend(),
            "devices": [{"id": d.id, "platform": d.platform, "kind": getattr(d, "device_kind", "")}
                        for d in jax.devices()]}


def mfu(dtype: str, smoke: bool) -> dict:
    preset, steps = ("tiny", 2) if smoke else ("medium", 10)
    cfg, batch_sizes = bench_gpu_mfu.PRESETS[preset]
    if smoke and dtype == "bfloat16":  # a GPU's `auto` would pick cuDNN: ask for it, so a CPU takes the fallback
        cfg = dataclasses.replace(cfg, attention="cudnn")
    peak = 0.5 if smoke else None   # --smoke: a made-up CPU peak, so the formula is exercised
    try:
        report = {"preset": preset, **bench_gpu_mfu.run_bench(cfg, batch_sizes[dtype], steps, dtype, peak)}
    except Exception as exc:  # noqa: BLE001  (cuDNN's kernel refused: measure with XLA's attention)
        if bench_gpu_mfu.attention_implementation(cfg.attention, bench_gpu_mfu.COMPUTE_DTYPES[dtype]) != "cudnn":
            raise
        xla = dataclasses.replace(cfg, attention="xla")
        report = {"preset": preset, "cudnn_error": f"{type(exc).__name__}: {exc}"[:2000],
                  **bench_gpu_mfu.run_bench(xla, batch_sizes[dtype], steps, dtype, peak)}
    report["line"] = bench_gpu_mfu.describe(report, preset)
    return report


def save_overlap(smoke: bool) -> dict:
    preset = "tiny" if smoke else "small"
    cfg, batch_size = bench_checkpoint_overlap.PRESETS[preset]
    with tempfile.TemporaryDirectory() as tmp:
        return {"preset": preset, "batch_size": batch_size,
                **bench_checkpoint_overlap.measure(cfg, batch_size, 4 if smoke else 10, tmp)}


def tiny_moe(smoke: bool, workdir: str) -> dict:
    """experiments/tiny_moe.py's train step and what it needs, run in child processes of this one."""
    from executor import materialize
    from experiments import tiny_moe as experiment

    options = experiment.TinyMoeOptions(train_steps=2 if smoke else experiment.TinyMoeOptions.train_steps)
    trained = experiment.build(options)[0].config.train_path.step   # summary -> its train dependency
    started = time.perf_counter()
    out = materialize(trained, prefix=workdir, runner="inline")
    rows = [json.loads(line) for line in Path(out, "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {"output_path": out, "steps": rows[-1]["step"], "final_loss": rows[-1]["loss"],
            "first_loss": rows[0]["loss"], "compute_dtype": trained.config.compute_dtype,
            # the first logged window includes compilation; the median of the others is the steady rate
            "tokens_per_s_median": statistics.median(r["tokens_per_s"] for r in rows[1:] or rows),
            "wall_s_with_data_steps": time.perf_counter() - started}


def tiny_moe_in_child(smoke: bool, workdir: str) -> dict:
    """tiny_moe in a fresh process: this one has started jax (its steps' processes must not be
    forked from it) and holds the device's memory."""
    out = Path(workdir) / "tiny_moe.json"
    command = [sys.executable, __file__, "--part", "tiny_moe", "--workdir", workdir, "--json", str(out)]
    proc = subprocess.run(command + (["--smoke"] if smoke else []), timeout=CHILD_TIMEOUT_S)
    if proc.returncode != 0:
        raise RuntimeError(f"the tiny_moe process exited with {proc.returncode} (its output is above)")
    return json.loads(out.read_text())


def run_part(name: str, fn, results: dict, json_path: str) -> None:
    """Run one part into `results`, then rewrite the JSON: a run cut short keeps the parts it finished."""
    started = time.perf_counter()
    try:
        results[name] = {"ok": True, **fn()}
    except Exception as exc:  # noqa: BLE001  (record it and go on to the next part)
        results[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
    results[name]["part_s"] = time.perf_counter() - started
    results["wall_s"] = time.time() - results["started_unix"]
    Path(json_path).write_text(json.dumps(results, indent=1))
    print(f"[gpu_check] {name}: {_summary(results[name])}", flush=True)


def _summary(part: dict) -> str:
    if not part["ok"]:
        return f"FAILED ({part['error']})"
    if "line" in part:
        return part["line"]
    if "devices" in part:
        return f"jax {part['jax']} on {part['backend']}: " + ", ".join(d["kind"] or d["platform"] for d in part["devices"])
    if "steps_during_save" in part:
        return (f"step {part['step_s_median_without_save'] * 1e3:.1f} ms without a save, "
                f"{part['step_s_median_with_save_in_flight'] * 1e3:.1f} ms with one in flight; "
                f"pause {part['background_save_pause_s'] * 1e3:.0f} ms background, "
                f"{part['synchronous_save_pause_s'] * 1e3:.0f} ms synchronous ({part['state_mb']:.0f} MB)")
    if "tokens_per_s_median" in part:
        return (f"{part['steps']} steps, loss {part['first_loss']:.3f} -> {part['final_loss']:.3f}, "
                f"{part['tokens_per_s_median']:,.0f} tokens/s")
    return ", ".join(f"{key} {value}" for key, value in part.items() if key != "ok")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny presets on whatever device (CPU in tests)")
    parser.add_argument("--json", default="gpu_check.json", help="where every figure goes")
    parser.add_argument("--workdir", help="prefix for tiny_moe's steps (default: a temporary directory)")
    parser.add_argument("--part", choices=("tiny_moe",), help=argparse.SUPPRESS)  # the child process
    args = parser.parse_args(argv)
    if args.part == "tiny_moe":
        Path(args.json).write_text(json.dumps(tiny_moe(args.smoke, args.workdir)))
        return 0
    results: dict = {"smoke": args.smoke, "started_unix": time.time()}
    with tempfile.TemporaryDirectory() as tmp:
        # first, while this process has not touched the device: the child gets all of its memory
        run_part("tiny_moe", lambda: tiny_moe_in_child(args.smoke, args.workdir or tmp), results, args.json)
        run_part("devices", devices, results, args.json)
        for dtype in ("float32", "bfloat16"):
            run_part(f"mfu_{dtype}", lambda dtype=dtype: mfu(dtype, args.smoke), results, args.json)
        run_part("save_overlap", lambda: save_overlap(args.smoke), results, args.json)
    print(f"[gpu_check] every figure: {args.json} ({results['wall_s']:.0f} s)", flush=True)
    return 0 if all(part.get("ok") for part in results.values() if isinstance(part, dict)) else 1


if __name__ == "__main__":
    sys.exit(main())
