#!/usr/bin/env python3
"""Validate cpbench JSON reports.

Two layers, both must pass:
  1. the JSON Schema in results_schema/report.schema.json (draft 2020-12): fields, types, units,
     which blocks a result carries for its status and the report's command;
  2. semantic checks the schema cannot express: maxima over ranks, percentile order, sample
     counts, per-rank list lengths, the measured-vs-model bytes flag, and DESIGN's formulas
     (bandwidths, overlap ratio, TFLOP/s, MFU, HFU, imbalance, the integrity flags), listed in
     docs/REPORT.md. A report is checked against its own version's schema (schema_path).

Every problem is printed as `FILE: $.json.path: message`. Exit status: 0 when every report is
valid, 1 when any report is invalid or unreadable, 2 on a usage error or a broken schema file.

The plot and compare tools import this module (load_report) so that all three agree on what a
valid report is.
"""
import argparse
import json
import sys
from pathlib import Path

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "results_schema"
SCHEMA_PATH = SCHEMA_DIR / "report.schema.json"  # the newest version's
# Every version this reader knows, oldest first, the last being SCHEMA_PATH's; an older one is
# validated against the schema kept for it (schema_path). tests/python/check_schema_versions.py
# asserts each has its file. docs/REPORT.md: the migrations between versions.
SUPPORTED_SCHEMA_VERSIONS = (3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14)


def schema_path(version):
    """The schema file of a version this reader knows: the current one, or the kept
    report.schema.v<N>.json (results_schema/README.md, Versioning)."""
    return SCHEMA_PATH if version == SUPPORTED_SCHEMA_VERSIONS[-1] else SCHEMA_DIR / f"report.schema.v{version}.json"

# Relative tolerance for values the writer derives from other reported values (bandwidths,
# TFLOP/s, MFU, HFU, imbalance, overlap ratio): loose enough for float32 intermediates, tight
# enough to catch a wrong unit (x1000, percent vs fraction) or a wrong formula.
FORMULA_RTOL = 1e-4
# Minimum/maximum over a list of the same doubles: equal up to printing.
EXACT_RTOL = 1e-9


class ReportError(Exception):
    """A report that cannot be read or is not valid; str() lists every problem, one a line."""


def json_path(parts):
    out = "$"
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        elif p.isidentifier():
            out += f".{p}"
        else:
            out += "[" + json.dumps(p) + "]"
    return out


def _reject_constant(name):
    raise ValueError(f"non-standard JSON constant {name} (NaN/Infinity are not valid JSON)")


def load_json(path):
    try:
        with open(path, "r", encoding="utf-8") as f:
            return json.load(f, parse_constant=_reject_constant)
    except OSError as e:
        raise ReportError(f"{path}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise ReportError(f"{path}: not UTF-8 text: {e}") from None
    except json.JSONDecodeError as e:
        raise ReportError(f"{path}: not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except ValueError as e:
        raise ReportError(f"{path}: not valid JSON: {e}") from None


def load_schema(path=None):
    """{version: validator} for every supported version, each from its own schema file; with a
    path, that one schema for every version. Raises ReportError when a schema itself is broken."""
    if path:
        one = _load_validator(Path(path))
        return {ver: one for ver in SUPPORTED_SCHEMA_VERSIONS}
    return {ver: _load_validator(schema_path(ver)) for ver in SUPPORTED_SCHEMA_VERSIONS}


def _load_validator(path):
    try:
        import jsonschema
    except ImportError:
        raise ReportError("the Python package 'jsonschema' is missing (scripts/deps.sh installs it)") from None
    if not hasattr(jsonschema, "Draft202012Validator"):
        raise ReportError("jsonschema >= 4.0 is needed for JSON Schema draft 2020-12 "
                          f"(found {getattr(jsonschema, '__version__', 'an older version')})")
    schema = load_json(path)
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.exceptions.SchemaError as e:
        raise ReportError(f"{path}: not a valid draft 2020-12 schema: {e.message}") from None
    return jsonschema.Draft202012Validator(schema)


def _leaf_errors(error):
    """The most specific errors under a combinator error (if/then, allOf ...)."""
    if error.context:
        for sub in error.context:
            yield from _leaf_errors(sub)
    else:
        yield error


def _rule_of(schema, schema_path):
    """Description of the innermost 'Rule (n)' subschema on an error's schema path, or ''."""
    node, rule = schema, ""
    for key in schema_path:
        if isinstance(node, dict) and key not in node and isinstance(node.get("$ref"), str) \
                and node["$ref"].startswith("#/"):
            target = schema
            for part in node["$ref"][2:].split("/"):
                target = target[part]
            node = target
            if str(node.get("description", "")).startswith("Rule"):
                rule = node["description"]
        try:
            node = node[key]
        except (KeyError, IndexError, TypeError):
            return rule
        if isinstance(node, dict) and str(node.get("description", "")).startswith("Rule"):
            rule = node["description"]
    return rule


def _path_key(parts):
    return [(0, p, "") if isinstance(p, int) else (1, 0, p) for p in parts]


def schema_errors(report, validator):
    """[(path, message)] of every schema violation, in document order."""
    found = []
    for err in validator.iter_errors(report):
        for leaf in _leaf_errors(err):
            msg = leaf.message
            if leaf.validator == "not" and leaf.validator_value == {}:
                # The schema forbids a field with {"not": {}} and says why in its description.
                why = leaf.schema.get("description", "") if isinstance(leaf.schema, dict) else ""
                msg = "not allowed" + (f": {why}" if why else "")
            else:
                rule = _rule_of(validator.schema, leaf.absolute_schema_path)
                if rule:
                    msg += f" ({rule})"
            found.append((list(leaf.absolute_path), msg))
    found.sort(key=lambda pm: (_path_key(pm[0]), pm[1]))
    out = []
    for parts, msg in found:
        item = (json_path(parts), msg)
        if item not in out:
            out.append(item)
    return out


def _close(a, b, rtol, atol=1e-12):
    return abs(a - b) <= max(atol, rtol * max(abs(a), abs(b)))


def _check_nccl(n, comm, err):
    """context.nccl: present exactly with --comm nccl, and consistent in itself."""
    where = ["context", "nccl"]
    if comm != "nccl":
        if n is not None:
            err(where, f"present although config.comm is {comm!r} (only --comm nccl reports it)")
        return
    if n is None:
        err(["context"], "config.comm is 'nccl' but context.nccl (what went through NCCL) is missing")
        return
    if n["used"] != (n["communicators"] > 0):
        err(where + ["used"], f"{n['used']} but {n['communicators']} NCCL communicators were created")
    if n["one_rank_mode"] and n["communicators"] == 0:
        err(where + ["one_rank_mode"], "one-rank NCCL mode without any NCCL communicator")
    through = sum(n["calls_through_nccl"].values())
    if through and n["communicators"] == 0:
        err(where + ["calls_through_nccl"], f"{through} calls through NCCL without any NCCL communicator")
    loc = n["calls_local"]
    if loc["send"] != loc["recv"]:
        err(where + ["calls_local"], f"local send {loc['send']} != local recv {loc['recv']} (self messages pair up)")


def semantic_errors(report):
    """[(path, message)] of the checks beyond the schema. Assumes the report is schema-valid."""
    errs = []

    def err(parts, msg):
        errs.append((json_path(parts), msg))

    ctx, cfg = report["context"], report["config"]
    P = cfg["world_size"]
    if ctx["world_size"] != P:
        err(["context", "world_size"], f"{ctx['world_size']} != config.world_size {P}")
    if ctx["ranks_per_node"] > ctx["world_size"]:
        err(["context", "ranks_per_node"], f"{ctx['ranks_per_node']} > world_size {ctx['world_size']}")
    if cfg["heads"] % cfg["kv_heads"]:
        err(["config", "kv_heads"], f"{cfg['kv_heads']} does not divide heads {cfg['heads']}")
    if (cfg["block"] == "full") != (cfg["ffn_dim"] is not None):  # the MLP's F exactly when there is one
        err(["config", "ffn_dim"], f"{cfg['ffn_dim']!r} under block {cfg['block']!r}: an integer under 'full', "
                                   "null under 'attn'")
    if cfg["backend"] == "cpu":  # any dtype: bf16/fp16 are emulated (DESIGN "Rounding points")
        if cfg["comm"] != "mpi":
            err(["config", "comm"], f"backend cpu communicates with mpi only, not {cfg['comm']}")
        if ctx["gpus"]:
            err(["context", "gpus"], f"backend cpu: expected no GPUs, got {ctx['gpus']}")
    elif not ctx["gpus"]:
        err(["context", "gpus"], "backend cuda: expected at least one GPU name")
    _check_nccl(ctx.get("nccl"), cfg["comm"], err)

    seen = {}
    for i, r in enumerate(report["results"]):
        base = ["results", i]
        key = (r["label"], r["seq"])
        if key in seen:
            err(base, f"duplicate (label, seq) {key}: also results[{seen[key]}]")
        else:
            seen[key] = i
        # An entry names a strategy, or one of its meshes ("usp[t2xu2xr2]", whose result is that label
        # without the MLP's own mesh: "+mlpN" under --mlp-tp, exactly when mesh.mlp_tp says so).
        mlp = r.get("mesh", {}).get("mlp_tp")
        suffix = f"+mlp{mlp}" if mlp else ""
        if (suffix and not r["label"].endswith(suffix)) or (not suffix and "+mlp" in r["label"]):
            err(base + ["label"], f"'{r['label']}' and mesh.mlp_tp {mlp}: the label ends in '+mlpN' exactly when mesh.mlp_tp is N")
        mesh_label = r["label"][:len(r["label"]) - len(suffix)] if suffix else r["label"]
        if mlp and cfg["mesh"].get("mlp_tp") != mlp:
            err(base + ["mesh", "mlp_tp"], f"{mlp}, but config.mesh.mlp_tp is {cfg['mesh'].get('mlp_tp')}")
        if r["strategy"] not in [s.split("[")[0] for s in cfg["strategies"]]:
            err(base + ["strategy"], f"'{r['strategy']}' is not in config.strategies")
        elif "[" in mesh_label and r["strategy"] not in cfg["strategies"] and mesh_label not in cfg["strategies"]:
            err(base + ["label"], f"'{r['label']}' is neither a named mesh nor a mesh of a strategy in config.strategies")
        if r["seq"] not in cfg["seqs"]:
            err(base + ["seq"], f"{r['seq']} is not in config.seqs")
        if "verify" in r:
            _check_verify(r["verify"], base + ["verify"], err)
        if r["status"] != "ok":
            continue
        mesh = r["mesh"]
        if mesh["tp"] * mesh["ulysses"] * mesh["ring"] != P:
            err(base + ["mesh"], f"tp {mesh['tp']} x ulysses {mesh['ulysses']} x ring {mesh['ring']} != world_size {P}")
        sizes = {lv["name"]: lv["size"] for lv in mesh["levels"]}
        prod = 1
        for lv in mesh["levels"]:
            prod *= lv["size"]
        if prod != P or mesh["levels"][0]["name"] != "tp" or sizes.get("tp") != mesh["tp"] or \
                sizes.get("ulysses") != mesh["ulysses"]:
            err(base + ["mesh", "levels"], f"levels {mesh['levels']} must start with tp, match tp/ulysses and "
                f"multiply to world_size {P}")
        if "timing" in r:
            for name, st in r["timing"].items():
                _check_stats(st, base + ["timing", name], cfg["iters"], err)
            # The band: on step_ms only, exactly the simulated platform's, never on a measured report.
            want = ctx.get("simulated", {}).get("band")
            want = {"lo": want["lo"], "hi": want["hi"]} if want else None
            for name, st in r["timing"].items():
                got = st.get("band")
                if got != (want if name == "step_ms" else None):
                    err(base + ["timing", name, "band"], f"{got}, expected {want if name == 'step_ms' else None} "
                        "(only timing.step_ms of a simulated report has a band: context.simulated.band)")
        if "comm" in r:
            for phase, c in r["comm"].items():
                _check_comm(c, base + ["comm", phase], P, err)
                _check_tiers(c, base + ["comm", phase, "tiers"], P, err)
            # Schema 14: a third phase exactly when the backward repeats a forward (--recompute).
            repeats = cfg.get("recompute") in ("selective", "full")
            if repeats != ("recompute" in r["comm"]):
                err(base + ["comm"], f"recompute phase {'absent' if repeats else 'present'} under config.recompute "
                                     f"{cfg.get('recompute')!r}")
        if "overlap" in r:
            _check_overlap(r["overlap"], r.get("comm"), base + ["overlap"], P, err)
        if "memory" in r:
            _check_memory(r["memory"], base + ["memory"], P, err)
        if "balance" in r:
            _check_balance(r["balance"], base + ["balance"], P, err)
        if all(k in r for k in ("timing", "flops", "tflops", "mfu", "hfu", "peak")):
            _check_rates(r, base, err)
        if "integrity" in r:  # schema 4
            _check_integrity(r, base + ["integrity"], err)
        if "inference" in r:
            _check_inference(r, base + ["inference"], err)
    return errs


def _check_inference(r, path, err):
    """inference, prefill: cached + new_tokens = seq, miss_rate = new_tokens / seq, ttft_ms = the
    step's median; decode: cached = seq, new_tokens = decode_steps, tpot_ms = the step's median / S,
    and the other pass's fields null."""
    i = r["inference"]
    median = r["timing"]["step_ms"]["median"] if "timing" in r else None
    if i["pass"] == "decode":
        for k in ("ring_pass", "miss_rate", "ttft_ms"):
            if i.get(k) is not None:
                err(path + [k], f"{i[k]!r}, expected null under decode")
        if i["cached"] != r["seq"]:
            err(path + ["cached"], f"{i['cached']} != seq {r['seq']} (decode reads the whole seq from the cache)")
        S = i.get("decode_steps")
        if not S or i["new_tokens"] != S:
            err(path + ["new_tokens"], f"{i['new_tokens']}, expected decode_steps = {S}")
        elif median is not None and (i.get("tpot_ms") is None or not _close(i["tpot_ms"], median / S, FORMULA_RTOL)):
            err(path + ["tpot_ms"], f"{i.get('tpot_ms')}, expected timing.step_ms.median / decode_steps = {median / S:g}")
        return
    for k in ("decode_steps", "tpot_ms"):
        if i.get(k) is not None:
            err(path + [k], f"{i[k]!r}, expected null under prefill")
    if i["cached"] + i["new_tokens"] != r["seq"]:
        err(path + ["new_tokens"], f"cached {i['cached']} + new_tokens {i['new_tokens']} != seq {r['seq']}")
    if not _close(i["miss_rate"], i["new_tokens"] / r["seq"], FORMULA_RTOL):
        err(path + ["miss_rate"], f"{i['miss_rate']:g}, expected new_tokens / seq = {i['new_tokens'] / r['seq']:g}")
    if median is not None and not _close(i["ttft_ms"], median, FORMULA_RTOL):
        err(path + ["ttft_ms"], f"{i['ttft_ms']:g}, expected timing.step_ms.median = {median:g}")


def _check_stats(st, path, iters, err):
    order = ["min", "p10", "median", "p90", "max"]
    vals = [st[k] for k in order]
    if any(a > b for a, b in zip(vals, vals[1:])):
        err(path, "percentiles not sorted: need min <= p10 <= median <= p90 <= max, got "
            + ", ".join(f"{k}={st[k]:g}" for k in order))
    n = len(st["samples"])
    if n != iters:
        err(path + ["samples"], f"{n} samples, expected config.iters = {iters}")
    if n:
        if not _close(st["min"], min(st["samples"]), EXACT_RTOL):
            err(path + ["min"], f"{st['min']:g} != smallest sample {min(st['samples']):g}")
        if not _close(st["max"], max(st["samples"]), EXACT_RTOL):
            err(path + ["max"], f"{st['max']:g} != largest sample {max(st['samples']):g}")


def _check_comm(c, path, P, err):
    per = c["per_rank"]
    if len(per) != P:
        err(path + ["per_rank"], f"{len(per)} entries, expected world_size {P}")
    if per and c["bytes_sent"] != max(per):
        err(path + ["bytes_sent"], f"{c['bytes_sent']} != max(per_rank) {max(per)}")
    pred = c["predicted_bytes"]
    # The model per rank (ring --balance dynamic: ranks differ); older reports: one figure for all.
    want = c.get("predicted_per_rank") or [pred] * len(per)
    if len(want) != len(per):
        err(path + ["predicted_per_rank"], f"{len(want)} entries, expected {len(per)}")
    elif want and pred != max(want):
        err(path + ["predicted_bytes"], f"{pred} != max(predicted_per_rank) {max(want)}")
    off = [q for q, b in enumerate(per) if q < len(want) and b != want[q]]
    if c["matches_model"] and off:
        err(path + ["matches_model"], f"true, but per_rank[{off[0]}] = {per[off[0]]} != predicted_per_rank[{off[0]}] {want[off[0]]}")
    elif not c["matches_model"] and per and not off:
        err(path + ["matches_model"], f"false, but every rank sent its predicted_per_rank")
    total = sum(op["bytes_sent"] for op in c["ops"])
    if per and total != per[0]:
        err(path + ["ops"], f"bytes_sent of the ops (rank 0's calls) sum to {total}, not per_rank[0] = {per[0]}")
    for j, op in enumerate(c["ops"]):
        p = path + ["ops", j]
        g = op["group_size"]
        if g > P:
            err(p + ["group_size"], f"{g} > world_size {P}")
        if op["op"] in ("recv", "barrier") and op["bytes_sent"]:
            err(p + ["bytes_sent"], f"{op['op']} sends nothing, got {op['bytes_sent']}")
        if g == 1 and op["bytes_sent"]:
            err(p + ["bytes_sent"], f"a group of one rank sends nothing, got {op['bytes_sent']}")
        if op["op"] == "recv":
            continue  # its bandwidths count bytes received, which the report does not carry
        t = op["time_ms"]
        busbw = op["bytes_sent"] / (t * 1e6) if t > 0 and g > 1 else 0.0
        if not _close(op["busbw_gbps"], busbw, FORMULA_RTOL, 1e-9):
            err(p + ["busbw_gbps"], f"{op['busbw_gbps']:g}, expected bytes_sent/(time_ms*1e6) = {busbw:g}"
                + (" (0 for a group of one)" if g == 1 else ""))
        if g == 1:
            continue  # algbw of a group of one is a local copy rate
        if op["op"] in ("all_to_all", "all_gather", "reduce_scatter"):
            algbw = busbw * g / (g - 1)
        elif op["op"] == "send":
            algbw = busbw
        else:
            algbw = 0.0
        if not _close(op["algbw_gbps"], algbw, FORMULA_RTOL, 1e-9):
            err(p + ["algbw_gbps"], f"{op['algbw_gbps']:g}, expected {algbw:g} for {op['op']} on a group of {g}")


def _overlap_ratio(standalone, exposed, silent):
    if silent or standalone <= 0:
        return 1.0
    return min(1.0, max(0.0, 1.0 - exposed / standalone))


def _check_overlap(o, comm, path, P, err):
    per = o["per_rank"]
    if len(per) != P:
        err(path + ["per_rank"], f"{len(per)} entries, expected world_size {P}")
    if not per:
        return
    for j, pr in enumerate(per):
        silent = False
        if comm is not None and all(j < len(c["per_rank"]) for c in comm.values()):
            silent = sum(c["per_rank"][j] for c in comm.values()) == 0
        want = _overlap_ratio(pr["comm_standalone_ms"], pr["exposed_comm_ms"], silent)
        if abs(pr["ratio"] - want) > 1e-6:
            rule = "1 (rank sent no bytes)" if silent else "clamp(1 - exposed/standalone, 0, 1)"
            err(path + ["per_rank", j, "ratio"], f"{pr['ratio']:g}, expected {rule} = {want:g}")
    # Schema 3: the job's ratio is null exactly when no rank sends a byte (nothing to hide).
    job_silent = comm is not None and all(b == 0 for c in comm.values() for b in c["per_rank"])
    if job_silent != (o["ratio"] is None):
        err(path + ["ratio"], f"{o['ratio']!r}: must be null exactly when the job sends nothing "
                              f"(it sends {'nothing' if job_silent else 'bytes'})")
    for key, agg, name in (("comm_standalone_ms", max, "max"), ("exposed_comm_ms", max, "max"), ("ratio", min, "min"),
                           ("hta_ratio", min, "min")):
        if o[key] is None:
            continue
        want = agg(pr[key] for pr in per)
        if not _close(o[key], want, EXACT_RTOL):
            err(path + [key], f"{o[key]:g} != {name} over per_rank {want:g}")


def _check_tiers(c, path, P, err):
    t = c["tiers"]
    per = t["per_rank"]
    if len(per) != P:
        err(path + ["per_rank"], f"{len(per)} entries, expected world_size {P}")
    for j, pr in enumerate(per):
        if j < len(c["per_rank"]) and pr["intra_node_bytes"] + pr["inter_node_bytes"] != c["per_rank"][j]:
            err(path + ["per_rank", j], f"intra {pr['intra_node_bytes']} + inter {pr['inter_node_bytes']} "
                f"!= bytes sent {c['per_rank'][j]}")
    for key in ("intra_node_bytes", "inter_node_bytes"):
        if per and t[key] != max(pr[key] for pr in per):
            err(path + [key], f"{t[key]} != max over per_rank {max(pr[key] for pr in per)}")
    if "predicted" in t and len(t["predicted"]) != P:
        err(path + ["predicted"], f"{len(t['predicted'])} entries, expected world_size {P}")


def _check_memory(m, path, P, err):
    per = m["per_rank"]
    if len(per) != P:
        err(path + ["per_rank"], f"{len(per)} entries, expected world_size {P}")
    if per and m["peak_bytes"] != max(per):
        err(path + ["peak_bytes"], f"{m['peak_bytes']} != max(per_rank) {max(per)}")
    for kind in ("weights", "activations", "comm_buffers"):
        if m[kind] > m["peak_bytes"]:
            err(path + [kind], f"{m[kind]} > peak_bytes {m['peak_bytes']}")


def _check_balance(b, path, P, err):
    per = b["compute_ms_per_rank"]
    if len(per) != P:
        err(path + ["compute_ms_per_rank"], f"{len(per)} entries, expected world_size {P}")
    if not per:
        return
    mean = sum(per) / len(per)
    want = max(per) / mean if mean > 0 else 1.0
    if not _close(b["imbalance"], want, FORMULA_RTOL):
        err(path + ["imbalance"], f"{b['imbalance']:g}, expected max/mean of compute_ms_per_rank = {want:g}")
    fl = b["model_flops_per_rank"]
    if len(fl) != P:
        err(path + ["model_flops_per_rank"], f"{len(fl)} entries, expected world_size {P}")
    if fl:
        fmean = sum(fl) / len(fl)
        fwant = max(fl) / fmean if fmean > 0 else 1.0
        if not _close(b["flops_imbalance"], fwant, FORMULA_RTOL):
            err(path + ["flops_imbalance"], f"{b['flops_imbalance']:g}, expected max/mean of model_flops_per_rank = {fwant:g}")


def _check_rates(r, path, err):
    fl = r["flops"]
    if fl["hardware"] < fl["model"]:
        err(path + ["flops", "hardware"], f"{fl['hardware']:g} < model {fl['model']:g}")
    step_s = r["timing"]["step_ms"]["median"] * 1e-3
    if step_s <= 0:
        return
    peak = r["peak"]["tflops"]
    unavailable = r["peak"]["source"] == "unavailable"
    if unavailable != (peak is None):
        err(path + ["peak", "tflops"], f"{peak!r} with source {r['peak']['source']!r}: null exactly when unavailable")
        return
    if peak is None:
        for k in ("mfu", "hfu"):
            if r[k] is not None:
                err(path + [k], f"{r[k]:g}, expected null (peak unavailable)")
        if not _close(r["tflops"], fl["model"] / step_s / 1e12, FORMULA_RTOL, 1e-12):
            err(path + ["tflops"], f"{r['tflops']:g}, expected flops.model / (step_ms.median*1e-3) / 1e12")
        return
    want = {
        "tflops": fl["model"] / step_s / 1e12,
        "mfu": fl["model"] / step_s / (peak * 1e12),
        "hfu": fl["hardware"] / step_s / (peak * 1e12),
    }
    formula = {
        "tflops": "flops.model / (step_ms.median*1e-3) / 1e12",
        "mfu": "tflops / peak.tflops",
        "hfu": "flops.hardware / (step_ms.median*1e-3) / (peak.tflops*1e12)",
    }
    for k, v in want.items():
        if not _close(r[k], v, FORMULA_RTOL, 1e-12):
            err(path + [k], f"{r[k]:g}, expected {formula[k]} = {v:g}")


# integrity.flags: the kinds the writer raises (bench/metrics.h integrity_flags) and the relative
# difference between counted and expected FLOPs above which they disagree (kFlopsMismatchRtol).
INTEGRITY_KINDS = ("tflops_over_peak", "flops_mismatch")
FLOPS_MISMATCH_RTOL = 1e-6


def _check_integrity(r, path, err):
    """integrity: ok exactly when no flag; each kind of flag raised exactly when the report's own
    figures call for it: tflops > peak.tflops, and the sum of balance.model_flops_per_rank off
    expected_flops by more than FLOPS_MISMATCH_RTOL of it."""
    g = r["integrity"]
    if g["ok"] != (not g["flags"]):
        err(path + ["ok"], f"{g['ok']}, but {len(g['flags'])} flag(s): ok is true exactly when there are none")
    kinds = [f.split(":", 1)[0] for f in g["flags"]]
    peak = r["peak"]["tflops"] if "peak" in r else None
    want = {"tflops_over_peak": peak is not None and "tflops" in r and r["tflops"] > peak}
    expected = g["expected_flops"]
    if expected is not None and "balance" in r:
        counted = sum(r["balance"]["model_flops_per_rank"])
        want["flops_mismatch"] = abs(counted - expected) > FLOPS_MISMATCH_RTOL * expected
        why = f"counted {counted:.10g} (sum of balance.model_flops_per_rank) vs expected_flops {expected:.10g}"
    else:
        want["flops_mismatch"] = False
        why = "expected_flops is null" if expected is None else "no balance.model_flops_per_rank"
    reasons = {"tflops_over_peak": f"tflops {r.get('tflops')!r} vs peak.tflops {peak!r}", "flops_mismatch": why}
    for kind in INTEGRITY_KINDS:
        n = kinds.count(kind)
        if n > 1:
            err(path + ["flags"], f"{kind} flagged {n} times")
        elif bool(n) != want[kind]:
            err(path + ["flags"], f"{kind} {'flagged' if n else 'not flagged'}, but {reasons[kind]} says "
                                  f"{'it should be' if want[kind] else 'there is nothing to flag'}")


def _check_verify(v, path, err):
    want = max(v["tensors"].values())
    if not _close(v["max_rel_l2"], want, EXACT_RTOL):
        err(path + ["max_rel_l2"], f"{v['max_rel_l2']:g}, expected the max over tensors {want:g}")
    want_pass = v["max_rel_l2"] <= v["tolerance"]
    if v["passed"] != want_pass:
        err(path + ["passed"], f"{v['passed']}, but max_rel_l2 {v['max_rel_l2']:g} vs tolerance "
            f"{v['tolerance']:g} says {want_pass}")


def check_report(report, validators):
    """All problems of a parsed report as [(path, message)]; empty when valid. validators: what
    load_schema returns; the report is checked against its own version's schema."""
    ver = SUPPORTED_SCHEMA_VERSIONS[-1]  # a report without a version fails the newest schema's "required"
    if isinstance(report, dict) and "schema_version" in report:
        ver = report["schema_version"]
        if not isinstance(ver, int) or isinstance(ver, bool) or ver not in SUPPORTED_SCHEMA_VERSIONS:
            known = ", ".join(str(v) for v in SUPPORTED_SCHEMA_VERSIONS)
            return [("$.schema_version", f"{ver!r} is not supported by this reader (it knows {known})")]
    errs = schema_errors(report, validators[ver])
    if errs:
        return errs  # the semantic checks assume the structure is right
    return semantic_errors(report)


def load_report(path, validators=None):
    """Parse and fully validate one report; raise ReportError listing every problem."""
    validators = validators or load_schema()
    report = load_json(path)
    errs = check_report(report, validators)
    if errs:
        raise ReportError("\n".join(f"{path}: {p}: {m}" for p, m in errs))
    return report


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Validate cpbench JSON reports against results_schema/report.schema.json and "
                    "the semantic checks of docs/REPORT.md.",
        epilog="Exit status: 0 all valid; 1 any report invalid or unreadable; 2 usage error or broken schema.")
    ap.add_argument("reports", nargs="+", metavar="REPORT", help="report files (JSON)")
    ap.add_argument("--schema", metavar="FILE",
                    help=f"one schema file for every report (default: each report's version's, {SCHEMA_PATH} for the newest)")
    ap.add_argument("-q", "--quiet", action="store_true", help="print only problems")
    args = ap.parse_args(argv)

    try:
        validators = load_schema(args.schema)
    except ReportError as e:
        print(f"validate_report: {e}", file=sys.stderr)
        return 2

    bad = 0
    for path in args.reports:
        try:
            report = load_report(path, validators)
        except ReportError as e:
            bad += 1
            print(e, file=sys.stderr)
            continue
        if not args.quiet:
            print(f"{path}: valid (schema_version {report['schema_version']})")
    if bad:
        print(f"validate_report: {bad} of {len(args.reports)} report(s) invalid", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
