"""eval.py's result files and its table. Each row goes to eval-NAME-DATA.json beside its checkpoint
and its generated outputs to outputs-NAME-DATA.jsonl, named for the checkpoint, the examples it
scored and how it decoded, so that no evaluation overwrites another; a baseline's outputs to
outputs-LEAD-8-DATA.jsonl (and LEAD-1sent); each file is written atomically (temp file + rename).
The table of every row is markdown."""

import hashlib
import json
import os

from . import checkpoint
from .decodings import DECODINGS
from .errors import UserError
from .flags import defaults

# the decoding flags that name a result file when given away from their default (result_names)
DECODING_TAGS = dict(
    beam="beam",
    max_len="max",
    min_len="min",
    length_penalty="lp",
    length_norm="",
    no_repeat_ngram="nr",
    length_beam="lb",
    iterations="it",
    search="",
)
# their defaults, as each way of decoding declares them (--max-len's is None: the fine-tuning's --max-tgt)
DECODING_DEFAULTS = {k: v for kind in DECODINGS.values() for k, v in defaults(kind.add_flags).items()}


def check_writable(paths):
    """Before the first generation: every result can be written."""
    for path in paths:
        out_dir = os.path.dirname(os.path.abspath(path))
        if not os.access(out_dir, os.W_OK):
            raise UserError(f"cannot write the results beside {path} ({out_dir} is not writable)")


def data_tag(args):
    """The part of a result file's name that says which examples it scored: the split or the file,
    and the sample."""
    data = (
        args.split
        if args.data is None
        else (
            os.path.basename(args.data).split(".")[0]
            + "-"
            + hashlib.sha1(os.path.abspath(args.data).encode()).hexdigest()[:8]
        )
    )
    return data + (f"-sample{args.limit}" if args.limit else "")


def result_names(path, args, task="summarize", gen=None):
    """(eval json, outputs jsonl) beside the checkpoint, named for it, the data, and how it decodes
    (a classifier decodes nothing: no decoding settings in its names); gen: the settings the row
    decoded with (core/decodings.py: an ELMER row's exit rule, resolved against its checkpoint), None
    for a row without an exit rule."""
    tag = os.path.splitext(os.path.basename(path).removesuffix(checkpoint.PACKED))[0] + "-" + data_tag(args)
    setting = (gen or {}).get("exit_rule")
    if setting:  # a threshold sweep keeps each
        tag += f"-exit-{setting[0]}{setting[1]:g}"
    if task == "classify":
        return (
            os.path.join(os.path.dirname(os.path.abspath(path)), f"eval-{tag}.json"),
            os.path.join(os.path.dirname(os.path.abspath(path)), f"outputs-{tag}.jsonl"),
        )
    tag += {None: "", True: "-adaptive", False: "-allpasses"}[args.adaptive_stop]
    # a decoding flag away from its default: beam 1 and beam 5 of one checkpoint are two results
    tag += "".join(
        f"-{short}{getattr(args, name):g}"
        if isinstance(getattr(args, name), (int, float))
        else f"-{getattr(args, name)}"
        for name, short in DECODING_TAGS.items()
        if getattr(args, name, None) not in (None, DECODING_DEFAULTS.get(name))
    )
    out_dir = os.path.dirname(os.path.abspath(path))
    return os.path.join(out_dir, f"eval-{tag}.json"), os.path.join(out_dir, f"outputs-{tag}.jsonl")


def write_results(path, row, outputs, args, gen):
    """Atomically, the row (with the settings) and the outputs, named by result_names."""
    json_path, outputs_path = result_names(path, args, row.get("task", "summarize"), gen)
    settings = dict(vars(args))
    settings["exit"] = gen.get("exit_rule")  # the exit rule this row decoded with, None: not an elmer row
    settings["dtype"] = getattr(args, "dtype_run", settings.get("dtype"))  # what --dtype auto resolved to
    settings["device"] = getattr(args, "device_run", settings.get("device"))  # and --device auto, where it was timed
    if args.data is not None:  # a user's file: there is no split
        settings["split"] = None
    files = [(json_path, json.dumps(dict(row, generation=settings), indent=2))]
    if outputs is not None:
        files.append((outputs_path, jsonl(outputs)))
    for name, text in files:
        write_atomically(name, text)


def write_baseline(where, name, outputs, args):
    """Atomically, a baseline's outputs (LEAD-8, LEAD-1sent) in the folder `where`, named for it and
    the data as a checkpoint's are."""
    write_atomically(os.path.join(where, f"outputs-{name}-{data_tag(args)}.jsonl"), jsonl(outputs))


def jsonl(outputs):
    """One JSON line per example."""
    return "".join(json.dumps(o, ensure_ascii=False) + "\n" for o in outputs)


def write_atomically(path, text):
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def markdown(rows):
    cols = [
        "model",
        "arch",
        "decoding",
        "iterations",
        "params_M",
        "n",
        "rouge1",
        "rouge2",
        "rougeL",
        "accuracy",
        "macro_f1",
        "exit_measure",
        "exit_threshold",
        "mean_exit",
        "exit_frac",
        "entropy_p50",
        "entropy_p5",
        "dec_flops",
        "latency_ms",
        "samples_per_s",
    ]
    cols = [c for c in cols if any(c in r for r in rows)]
    fmt = lambda v: f"{v:.2f}" if isinstance(v, float) else str(v)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(fmt(r.get(c, "")) for c in cols) + " |" for r in rows]
    return "\n".join(lines)
