"""Few-shot multiple choice by log-likelihood: each choice is scored as the summed log-prob of
its tokens after the prompt (few-shot examples + the item's context). `acc` picks the highest
sum; `acc_norm` divides by the choice's UTF-8 length first (as lm-eval's acc_norm does).

Task files are JSONL: {"context": str, "choices": [str, ...], "answer": int} per line; shipped
ones live in steps/eval_tasks/.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

TASKS_DIR = Path(__file__).resolve().parent.parent / "eval_tasks"


def task_path(name: str) -> Path:
    path = TASKS_DIR / f"{name}.jsonl"
    if not path.exists():
        known = sorted(p.stem for p in TASKS_DIR.glob("*.jsonl"))
        raise FileNotFoundError(f"multiple-choice task {name!r} not found in {TASKS_DIR}; known: {known}")
    return path


def load_task(name: str) -> tuple[list[dict], str]:
    """Items and the file's sha256 (recorded with the results)."""
    path = task_path(name)
    data = path.read_bytes()
    items = [json.loads(line) for line in data.decode().splitlines() if line.strip()]
    for i, item in enumerate(items):
        if not (0 <= item["answer"] < len(item["choices"])):
            raise ValueError(f"{path}:{i + 1}: answer={item['answer']} is not an index into {item['choices']}")
    return items, hashlib.sha256(data).hexdigest()


def fewshot_prefix(items: list[dict], index: int, num_fewshot: int) -> str:
    """The `num_fewshot` items after `index` (cyclically), each with its correct answer."""
    shots = [items[(index + j) % len(items)] for j in range(1, num_fewshot + 1)] if len(items) > 1 else []
    return "".join(s["context"] + s["choices"][s["answer"]] + "\n\n" for s in shots)


def score_task(items: list[dict], encode, score_rows, seq_len: int, num_fewshot: int) -> dict:
    """`encode(text) -> ids`; `score_rows(inputs, targets, mask) -> nats per row` (fixed seq_len)."""
    rows, owners = [], []
    for i, item in enumerate(items):
        prompt = encode(fewshot_prefix(items, i, num_fewshot) + item["context"])
        for c, choice in enumerate(item["choices"]):
            ids = (prompt + encode(choice))[-(seq_len + 1):]
            n_choice = min(len(encode(choice)), len(ids) - 1)
            rows.append((ids, n_choice))
            owners.append((i, c))
    inputs = np.zeros((len(rows), seq_len), np.int32)
    targets = np.zeros_like(inputs)
    mask = np.zeros((len(rows), seq_len), np.float32)
    for r, (ids, n_choice) in enumerate(rows):
        n = len(ids) - 1
        inputs[r, :n], targets[r, :n] = ids[:-1], ids[1:]
        mask[r, n - n_choice:n] = 1
    nats = np.asarray(score_rows(inputs, targets, mask), np.float64)
    loglik = {}
    for (i, c), value in zip(owners, nats):
        loglik.setdefault(i, {})[c] = -value
    correct = correct_norm = 0
    for i, item in enumerate(items):
        ll = np.array([loglik[i][c] for c in range(len(item["choices"]))])
        lengths = np.array([max(len(ch.encode()), 1) for ch in item["choices"]])
        correct += int(np.argmax(ll) == item["answer"])
        correct_norm += int(np.argmax(ll / lengths) == item["answer"])
    n = len(items)
    return {"items": n, "num_fewshot": num_fewshot, "acc": correct / n, "acc_norm": correct_norm / n,
            "chance": float(np.mean([1 / len(it["choices"]) for it in items]))}
