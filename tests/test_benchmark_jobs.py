"""benchmarks/jobs.py: the scheduler that runs a table's pretraining and fine-tuning jobs."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from jobs import schedule  # noqa: E402


def recorder(events: list, lock: threading.Lock, active: list, peak: list):
    def job(name: str, seconds: float = 0.02):
        def fn():
            with lock:
                events.append(("start", name))
                active[0] += 1
                peak[0] = max(peak[0], active[0])
            time.sleep(seconds)
            with lock:
                active[0] -= 1
                events.append(("end", name))
            return name
        return fn
    return job


def test_dependencies_finish_first_and_at_most_parallel_jobs_run() -> None:
    events, lock, active, peak = [], threading.Lock(), [0], [0]
    job = recorder(events, lock, active, peak)
    jobs = [("pretrain a", job("pretrain a", 0.15), []), ("pretrain b", job("pretrain b", 0.02), []),
            ("ft a", job("ft a"), ["pretrain a"]), ("ft b 1", job("ft b 1"), ["pretrain b"]),
            ("ft b 2", job("ft b 2"), ["pretrain b"])]
    schedule(jobs, parallel=2)
    order = events
    assert peak[0] == 2
    for dep, after in [("pretrain a", "ft a"), ("pretrain b", "ft b 1"), ("pretrain b", "ft b 2")]:
        assert order.index(("end", dep)) < order.index(("start", after))
    # b's fine-tuning used the free core while a still pretrained
    assert order.index(("start", "ft b 1")) < order.index(("end", "pretrain a"))


def test_a_failed_job_raises_and_a_missing_dependency_is_reported() -> None:
    def boom():
        raise ValueError("job failed")

    with pytest.raises(ValueError, match="job failed"):
        schedule([("a", boom, [])], parallel=1)
    with pytest.raises(RuntimeError, match="never run"):
        schedule([("b", lambda: None, ["missing"])], parallel=1)


def test_a_smoke_run_gets_its_own_root_and_never_writes_the_real_results(tmp_path: Path) -> None:
    import argparse

    from jobs import ROOT, table_arguments, table_paths

    ap = argparse.ArgumentParser()
    table_arguments(ap, str(tmp_path / "runs" / "t"))
    root, out = table_paths(ap.parse_args(["--smoke"]), str(tmp_path / "runs" / "t"), "benchmarks/results/t.json")
    assert root == tmp_path / "runs" / "t-smoke" and out == root / "table.json"
    root, out = table_paths(ap.parse_args([]), str(tmp_path / "runs" / "t"), "benchmarks/results/t.json")
    assert root == tmp_path / "runs" / "t" and out == ROOT / "benchmarks/results/t.json"


def test_a_finetuning_length_gets_its_own_runs_and_replaces_every_tasks_length() -> None:
    import chinese_masking as cm

    assert cm.ft_name("msra-ner", "piece") == "ft-msra-ner-piece"  # the existing runs keep their names
    assert cm.ft_name("msra-ner", "piece", 128) == "ft-msra-ner-piece-len128"
    assert cm.task_overrides("cmrc2018") == ["max_seq_len=384", "doc_stride=128"]
    assert cm.task_overrides("cmrc2018", 128) == ["max_seq_len=128", "doc_stride=32"]
    assert cm.task_overrides("msra-ner", 128) == ["epochs=10", "max_seq_len=128"]


def _stopping_job(job: tuple) -> str:  # module level: the forked workers find it by name
    Path(job[2], f"started-{job[3]}").touch()
    time.sleep(0.5 if job[3] == 1 else 0.1)  # seed 2 fails while seed 1 still runs
    if job[3] == 2:
        raise RuntimeError("stopped by a signal")
    return "ok"


def test_multitask_table_starts_no_job_after_one_fails_or_is_interrupted(tmp_path: Path) -> None:
    import multitask_table

    jobs = [("multi", "conll", str(tmp_path), seed) for seed in range(1, 8)]
    with pytest.raises(RuntimeError, match="stopped by a signal"):
        multitask_table.run_jobs(jobs, parallel=2, job_fn=_stopping_job)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["started-1", "started-2"]
    with pytest.raises(RuntimeError, match="stopped by a signal"):
        multitask_table.run_jobs(jobs, parallel=1, job_fn=_stopping_job)


def test_tapt_table_pairs_recorded_direct_scores_only_if_a_rerun_reproduces_them(tmp_path: Path) -> None:
    import json

    from tapt_table import recorded_direct

    path = tmp_path / "earlier.json"
    path.write_text(json.dumps({"direct": {"per_seed": {"1": 85.0466, "2": 84.8141, "3": 84.9494}}}))
    assert recorded_direct(path, {1: 85.0466}, "f1") == {1: 85.0466, 2: 84.8141, 3: 84.9494}
    with pytest.raises(SystemExit, match="seed 1 was 85.046600, its re-run gives 85.100000"):
        recorded_direct(path, {1: 85.1}, "f1")
    for rerun in ({}, {7: 10.0}):  # nothing re-run, or only a seed that was never recorded
        with pytest.raises(SystemExit, match="no recorded seed was re-run"):
            recorded_direct(path, rerun, "f1")
    # the first SST-2 record keeps each seed's metrics as fractions under finetune.minilm
    legacy = tmp_path / "legacy.json"
    legacy.write_text(json.dumps({"finetune": {"minilm": {"1": {"accuracy": 0.875}, "2": {"accuracy": 0.88}}}}))
    assert recorded_direct(legacy, {1: 87.5}, "accuracy") == {1: 87.5, 2: 88.0}
    with pytest.raises(SystemExit, match="seed 1 was 87.500000"):
        recorded_direct(legacy, {1: 87.96}, "accuracy")


def test_tapt_table_reads_each_seeds_selection_score_not_its_reported_one(tmp_path: Path) -> None:
    import json

    from tapt_table import seed_metrics, seed_scores, selection_scores

    for seed, (chosen, reported) in {1: (0.86, 0.88), 2: (0.87, 0.885)}.items():
        (tmp_path / f"seed-{seed}").mkdir()
        (tmp_path / f"seed-{seed}" / "metrics.json").write_text(json.dumps(
            {"best_selection_score": chosen, "selection": "train-slice", "dev": {"accuracy": reported}}))
    runs = seed_metrics(tmp_path)
    assert selection_scores(runs) == {1: {"split": "train-slice", "score": 86.0},
                                      2: {"split": "train-slice", "score": 87.0}}
    assert seed_scores(runs, "dev", "accuracy") == {1: 88.0, 2: 88.5}


def test_multitask_table_fills_the_single_row_from_an_earlier_table_only_if_a_rerun_reproduces_it(tmp_path: Path) -> None:
    import json

    from multitask_table import add_recorded_single

    path = tmp_path / "earlier.json"
    path.write_text(json.dumps({"table": {"ner": {"single": {"seeds": [1, 2, 3], "values": [85.0, 84.8, 84.9]},
                                                  "uncertainty": {"seeds": [1, 2, 3], "values": [83.0, 83.1, 83.2]}}}}))
    found = {"ner": {"single": {1: 85.0}, "uncertainty": {1: 84.0}}}
    assert add_recorded_single(found, path) == []
    assert found["ner"] == {"single": {1: 85.0, 2: 84.8, 3: 84.9}, "uncertainty": {1: 84.0}}  # variants never filled
    with pytest.raises(ValueError, match="ner: seed 1 was 85.000000, its re-run gives 85.500000"):
        add_recorded_single({"ner": {"single": {1: 85.5}}}, path)
    for rows in ({"uncertainty": {1: 84.0}}, {"single": {4: 70.0}}):  # no re-run, or none of a recorded seed
        with pytest.raises(ValueError, match="no recorded single-task seed was re-run"):
            add_recorded_single({"ner": rows}, path)


def test_multitask_table_fills_a_named_variant_row_from_an_earlier_table(tmp_path: Path) -> None:
    import json

    from multitask_table import add_recorded_rows

    path = tmp_path / "earlier.json"
    path.write_text(json.dumps({"table": {"rte": {"sqrt": {"seeds": [1], "values": [54.5]},
                                                  "joint-gradnorm": {"seeds": [1], "values": [61.7]}}}}))
    found = {"rte": {"single": {1: 57.0, 2: 57.4}, "sqrt": {2: 55.0}, "joint-gradnorm": {1: 57.8}}}
    known = {"sqrt", "joint-gradnorm", "uniform"}
    # seed 1 of sqrt comes from the file; no seed of it was run here to check it
    assert add_recorded_rows(found, [f"sqrt={path}"], known) == (["rte/sqrt/1"], ["rte/sqrt"])
    assert found["rte"]["sqrt"] == {1: 54.5, 2: 55.0}
    assert found["rte"]["joint-gradnorm"] == {1: 57.8}  # a row not named is never filled
    with pytest.raises(ValueError, match="rte: seed 1 was 61.700000, its re-run gives 57.800000"):
        add_recorded_rows(found, [f"joint-gradnorm={path}"], known)  # a void recorded row is caught by its re-run
    with pytest.raises(ValueError, match="has no row 'uniform' for rte"):
        add_recorded_rows(found, [f"uniform={path}"], known)
    with pytest.raises(ValueError, match="'annealed' is not a row of this table"):
        add_recorded_rows(found, [f"annealed={path}"], known)
    with pytest.raises(ValueError, match="expected ROW=FILE"):
        add_recorded_rows(found, [str(path)], known)


def test_embedding_geometry_buckets_rows_by_corpus_count_with_hand_computed_cosines() -> None:
    import numpy as np

    from embedding_geometry import geometry

    weight = np.array([[1.0, 0.0], [0.0, 2.0], [3.0, 0.0], [3.0, 3.0], [1.0, 1.0]])
    counts = np.array([0, 0, 5, 5, 50])
    task = np.array([1, 0, 2, 1, 0])
    b = {(e["count_from"], e["count_to"]): e for e in geometry(weight, counts, task)}
    assert b[(0, 0)]["rows"] == 2 and b[(0, 0)]["mean_pairwise_cosine"] == 0.0  # orthogonal
    assert b[(0, 0)]["mean_norm"] == 1.5 and b[(0, 0)]["task_token_share"] == 0.25
    assert abs(b[(1, 9)]["mean_pairwise_cosine"] - 2 ** -0.5) < 1e-12  # 45 degrees apart
    assert b[(10, 99)]["rows"] == 1 and "mean_pairwise_cosine" not in b[(10, 99)]
    assert b[(1000, 9999)]["rows"] == 0


def test_multitask_table_refuses_to_replace_a_fuller_table(tmp_path: Path) -> None:
    import json

    from multitask_table import entries_lost

    out = tmp_path / "t.json"
    assert entries_lost(out, ["uncertainty"], [1]) == []  # nothing there yet
    out.write_text(json.dumps({"table": {"ner": {"single": {"seeds": [1, 2]}, "uncertainty": {"seeds": [1, 2]},
                                                 "mtdnn+ft": {"seeds": [1]}}}}))
    assert entries_lost(out, ["uncertainty", "mtdnn"], [1, 2]) == []
    assert entries_lost(out, ["uncertainty"], [1]) == ["ner/single/2", "ner/uncertainty/2", "ner/mtdnn+ft/1"]


def test_tapt_length_chooses_on_the_selection_split_and_refuses_unpaired_candidates(tmp_path: Path) -> None:
    import json

    from tapt_length import candidate, choose

    def record(name: str, steps: int, selection: list[float], diff: float, direct: float = 87.5) -> Path:
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({
            "split": "dev", "metric": "accuracy", "paired_seeds": [1, 2],
            "pretrain": {"steps": steps, "train_minutes": steps / 20},
            "direct": {"per_seed": {"1": direct, "2": 87.8}},
            "adapted": {"selection": {str(s + 1): {"split": "train-slice", "score": v} for s, v in enumerate(selection)}},
            "difference_mean_std": [diff, 0.1], "difference_t95": [diff - 1, diff + 1],
            "adapted_mean_std": [88.0, 0.2], "direct_mean_std": [87.65, 0.2]}))
        return path

    short = candidate(record("short", 600, [86.0, 87.0], +0.4))
    long_ = candidate(record("long", 2000, [86.5, 86.0], +0.9))  # better on dev, worse where it may be chosen
    tie = candidate(record("tie", 1200, [87.0, 86.0], +0.6))
    assert short["selection_mean"] == 86.5 and long_["selection_mean"] == 86.25
    assert choose([long_, short]) is short  # the reported difference chooses nothing
    assert choose([tie, short]) is short  # a tie goes to the shorter run
    with pytest.raises(SystemExit, match="differ in direct"):
        choose([short, candidate(record("other", 800, [90.0, 90.0], 0.0, direct=86.0))])
    broken = json.loads((tmp_path / "short.json").read_text())
    del broken["adapted"]["selection"]["2"]
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    with pytest.raises(SystemExit, match=r"no selection score for seed\(s\) \[2\]"):
        candidate(tmp_path / "broken.json")


def test_multitask_table_chooses_a_sweeps_variant_on_the_selection_split_only(tmp_path: Path) -> None:
    import json

    import multitask_table

    suite = {"run_root": str(tmp_path), "metrics": {"rte": "accuracy", "cola": "mcc"}}
    runs = {"a": {1: ({"rte": 0.60, "cola": 0.10}, 0.70), 2: ({"rte": 0.62, "cola": 0.12}, 0.70)},
            "b": {1: ({"rte": 0.58, "cola": 0.20}, 0.50), 2: ({"rte": 0.56, "cola": 0.18}, 0.50)}}
    for variant, by_seed in runs.items():
        for seed, (chosen, reported) in by_seed.items():
            d = tmp_path / variant / f"seed-{seed}"
            d.mkdir(parents=True)
            d.joinpath("metrics.json").write_text(json.dumps({"per_task": {t: {
                "best_selection_score": v, "dev": {suite["metrics"][t]: reported}} for t, v in chosen.items()}}))
    multitask_table.SUITES["fake"] = suite
    try:
        sel = multitask_table.selection_scores("fake", ["a", "b"], [1, 2])
    finally:
        del multitask_table.SUITES["fake"]
    # a: (60 + 10) / 2 = 35 and (62 + 12) / 2 = 37 → 36; b: 39 and 37 → 38, though a reports better
    choice = multitask_table.choose(sel, ["a", "b"], [1, 2])
    assert choice["chosen"] == "b"
    assert abs(choice["selection_mean"]["a"] - 36.0) < 1e-9 and abs(choice["selection_mean"]["b"] - 38.0) < 1e-9
    assert abs(choice["selection_per_task"]["b"]["cola"] - 19.0) < 1e-9
    tie = {"x": {1: {"rte": 5.0}}, "y": {1: {"rte": 5.0}}}
    assert multitask_table.choose(tie, ["y", "x"], [1])["chosen"] == "y"  # a tie goes to the first named
    with pytest.raises(ValueError, match="no finished run for a/seed-3"):
        multitask_table.choose(sel, ["a", "b"], [1, 3])


def test_chinese_masking_adds_recorded_seeds_only_for_a_model_and_seeds_that_reproduce(tmp_path: Path) -> None:
    import copy
    import json

    from chinese_masking import add_recorded

    curve = [{"step": 1000, "eval/mlm_accuracy": 0.13}, {"step": 2000, "eval/mlm_accuracy": 0.16}]
    path = tmp_path / "earlier.json"
    path.write_text(json.dumps({
        "pretraining": {"piece": {"eval_curve": curve}, "ernie": {"eval_curve": curve}},
        "cross_eval": {"piece": {"piece": 0.16}, "ernie": {"piece": 0.15}},
        "table": {"cmrc2018/f1": {"piece": {"seeds": [1, 2, 3], "values": [10.0, 10.5, 9.5]},
                                  "ernie": {"seeds": [1, 2], "values": [11.0, 10.8]}}}}))
    found = {"cmrc2018/f1": {"piece": {3: 9.5}, "ernie": {3: 11.2}}}
    facts, cross = {"piece": {"eval_curve": copy.deepcopy(curve)}}, {"piece": {"piece": 0.16}}
    assert add_recorded(found, facts, cross, path) == ["ernie"]  # ernie's seed 3 is on a model nothing checked
    assert found["cmrc2018/f1"] == {"piece": {1: 10.0, 2: 10.5, 3: 9.5}, "ernie": {1: 11.0, 2: 10.8, 3: 11.2}}
    assert set(facts) == {"piece", "ernie"} and cross["ernie"] == {"piece": 0.15}

    with pytest.raises(ValueError, match="cmrc2018/f1 piece: seed 3 was 9.500000, its re-run gives 9.400000"):
        add_recorded({"cmrc2018/f1": {"piece": {3: 9.4}}}, {}, {}, path)
    moved = [curve[0], {"step": 2000, "eval/mlm_accuracy": 0.1601}]
    with pytest.raises(ValueError, match="piece pretrained again does not reproduce its recorded held-out MLM curve"):
        add_recorded({}, {"piece": {"eval_curve": moved}}, {}, path)
    with pytest.raises(ValueError, match="piece pretrained again scores 0.17 on piece-masked"):
        add_recorded({}, {"piece": {"eval_curve": curve}}, {"piece": {"piece": 0.17}}, path)


def test_every_benchmark_script_imports_only_modules_and_names_that_exist():
    """A script that imports a deleted sibling (or a name gone from one, or from muppets) can no
    longer reproduce its BENCHMARKS row; checked from the source, without running anything."""
    import ast
    import importlib.util

    root = Path(__file__).resolve().parents[1] / "benchmarks"
    siblings = {p.stem: p for p in root.glob("*.py")}
    missing = []
    for script in sorted(root.glob("*.py")):
        for node in ast.walk(ast.parse(script.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                top = node.module.split(".")[0]
                if top in siblings:
                    defined = {n.id for n in ast.walk(ast.parse(siblings[top].read_text(encoding="utf-8")))
                               if isinstance(n, ast.Name)} | {
                        n.name for n in ast.walk(ast.parse(siblings[top].read_text(encoding="utf-8")))
                        if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))}
                    missing += [f"{script.name}: {a.name} from {top}" for a in node.names if a.name not in defined]
                elif top == "muppets" and importlib.util.find_spec(node.module) is None:
                    missing.append(f"{script.name}: {node.module}")
                elif top not in siblings and top != "muppets" and importlib.util.find_spec(top) is None:
                    missing.append(f"{script.name}: {node.module} (no such module)")
            elif isinstance(node, ast.Import):
                missing += [f"{script.name}: {a.name} (no such module)" for a in node.names
                            if a.name.split(".")[0] not in siblings and importlib.util.find_spec(a.name.split(".")[0]) is None]
    assert not missing, missing
