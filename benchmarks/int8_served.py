"""Issue 55: an int8 task model served equals its offline outputs — labels of every dev input.

Starts ``muppets serve MODEL --precision int8`` (benchmarks/serve_load.py's ServerProcess), sends
the task's dev inputs one per request from ``--clients`` concurrent clients (the server batches
them as they arrive, so batches differ from the offline ones), and compares each served label
and score with :class:`~muppets.transfer.predict.Predictor` (``precision="int8"``) offline in
batches of ``--batch-size``. int8 quantizes each token's input with its own scale
(:mod:`muppets.runtime`), so batch-mates cannot move a sentence's scores beyond float rounding of
the padded attention; the claim is about labels.

    python benchmarks/int8_served.py runs/distill/sst2/best --out benchmarks/results/issue55/served.json
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _serve_http import post  # noqa: E402
from serve_load import HOST, ServerProcess  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="a fine-tuned task directory (its muppets_finetune.json names the task)")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--batch-size", type=int, default=64, help="offline batch size")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--limit", type=int, default=0, help="dev inputs sent (0 = all)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    import torch

    from muppets.interop.safetensors_io import read_json_object
    from muppets.tasks import load_task
    from muppets.transfer import Predictor

    torch.set_num_threads(args.threads)
    task = read_json_object(Path(args.model) / "muppets_finetune.json")["task"]
    dev = load_task(task)["dev"]
    dev = dev[: args.limit] if args.limit else dev
    inputs = [ex.text if ex.text_b is None else [ex.text, ex.text_b] for ex in dev]
    offline = Predictor(args.model, batch_size=args.batch_size, precision="int8")
    want = offline(inputs)
    server = ServerProcess(args.model, ["--precision", "int8"], threads=args.threads).start()
    try:
        url = f"http://{HOST}:{server.port}/predict"

        def ask(x):
            status, body = post(url, {"inputs": [x]}, timeout=120)
            assert status == 200, body
            return {"prediction": body["predictions"][0], "score": body["scores"][0]}

        with ThreadPoolExecutor(args.clients) as pool:
            got = list(pool.map(ask, inputs))
    finally:
        server.stop()
    labels_equal = sum(g["prediction"] == w["label"] for g, w in zip(got, want))
    score_diff = max(abs(g["score"] - w["score"]) for g, w in zip(got, want))
    result = {"model": args.model, "task": task, "inputs": len(inputs), "labels_equal": labels_equal,
              "largest_score_difference": score_diff, "clients": args.clients, "offline_batch": args.batch_size,
              "threads": args.threads}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
