"""Evaluate fine-tuned checkpoints side by side: quality and speed in one table.

    python eval.py                                           # every fine-tuned run under checkpoints/, test split
    python eval.py checkpoints/ft-pmlm/best.pt checkpoints/ft-t5/best.pt --beam 4
    python eval.py CKPT --data my_test.jsonl --src-field article --tgt-field highlights
    python eval.py CKPT --text "a document"                  # its summary (or its class) alone, one line
    cut -f2 docs.tsv | python eval.py CKPT --text -          # one output line per line of stdin

Summarization: ROUGE-1/2/L F1 (rouge-score, stemming on), plus rows for the LEAD baselines
(first 8 words, first sentence). Classification: accuracy and macro-F1, plus a row for the majority
class of the evaluated examples (what a model that ignores its input scores). For every checkpoint:
the parameter count, the latency per sample at batch size 1 and the throughput at a large batch
(the device is synchronised before every clock read; warm-up runs are excluded). A directory
stands for every fine-tuned run under it (the best.pt of each). The table goes to stdout as
markdown; each checkpoint's row goes to eval-NAME-DATA.json next to it and its generated outputs
to outputs-NAME-DATA.jsonl (NAME the checkpoint's file name, DATA the split, or the --data file's
name and a hash of its path, with -sampleN under --limit, -exit-MEASUREX under an exit threshold
X (e.g. -exit-entropy0.5), -adaptive or -allpasses under --adaptive-stop or --no-adaptive-stop, and
a decoding flag away from its default, e.g. -beam1, -it4, -lb2, -static), so that no evaluation overwrites
another. ELMER rows add the mean exit layer, the fraction exiting
per layer and the decoder's multiply-adds relative to exit disabled (dec_flops).
Every checkpoint, data file and flag is checked before the first is evaluated (a flag that
applies to none of the checkpoints is named in a note); each checkpoint's files are written as soon as
its row exists, so a failure later in the call loses nothing already computed.

--text decodes the documents given instead of a data set: the given one, or with `--text -` each
line of stdin (read to its end first), truncated to the fine-tuning's --max-src as in an evaluation.
It prints each output on a line of stdout and nothing else there (no table, no files), with the
decoding flags and their defaults as in an evaluation, for one checkpoint.
"""
import hashlib
import json
import os
import sys

import torch

from core import checkpoint
from core.classify import classify_batch, macro_f1, predict
from core.config import ModelConfig
from core.decodings import DECODINGS, decoding_of
from core.distributed import resolve_dtype
from core.elmer.exit_measures import exit_settings
from core.errors import UserError, main_guard
from core.flags import AT_LEAST_1, flag, parser
from core.guards import check_positions, parse_args, refuse_unused
from core.architectures import ARCHS, arch_of, build_model
from core.generation import rouge, summarize
from core.model import count_parameters
from core.tasks import Labels, lead, load_split
from core.timing import speed
from core.tokenizer import Tokenizer
from core.training import add_dtype_flag, autocast


# the decoding flags that name a result file when given away from their default (result_names)
DECODING_TAGS = dict(beam="beam", max_len="max", min_len="min", length_penalty="lp", length_norm="",
                     no_repeat_ngram="nr", length_beam="lb", iterations="it", search="")
# what --text refuses: the flags of an evaluation over a data set
EVALUATION_ONLY = ("data", "split", "src_field", "tgt_field", "limit", "latency_samples", "no_lead")


def evaluation_flags(p):
    """The flags of every evaluation (and of --text, but those EVALUATION_ONLY)."""
    flag(p, "checkpoints", nargs="*", default=["checkpoints"],
         help="fine-tuned checkpoints, or directories: every best.pt under them (default: "
         "checkpoints, where finetune.py writes)")
    flag(p, "--data", default=None, help="a .jsonl file to evaluate on (default: the embedded corpus)")
    flag(p, "--split", default="test", choices=["train", "valid", "test"], help="split of the embedded corpus")
    flag(p, "--src-field", default=None)
    flag(p, "--tgt-field", default=None)
    flag(p, "--limit", rule=AT_LEAST_1, type=int, default=None,
         help="evaluate on N examples only: a sample of the split fixed by a seed, the same for every "
         "checkpoint (the embedded corpus is sorted by package, so its head is not a sample)")
    flag(p, "--text", default=None,
         help="decode this document instead of a data set, or with - each line of stdin: its output "
              "alone, one line each (a summary, or a classifier's label)")
    flag(p, "--max-len", rule=AT_LEAST_1, type=int, default=None,
         help="generated tokens at most, [EOS] included (default: the fine-tuning's --max-tgt, the "
         "longest target it trained)")
    flag(p, "--batch-size", rule=AT_LEAST_1, type=int, default=64, help="batch for quality and throughput")
    flag(p, "--latency-samples", rule=AT_LEAST_1, type=int, default=20, help="examples timed one by one")
    flag(p, "--no-lead", action="store_true",
         help="omit the baseline rows (LEAD; classification's majority class)")
    flag(p, "--device", default="auto", choices=["auto", "cpu", "cuda"])


# who declares each flag of the script: its own set, the dtype flag it shares with train.py and
# finetune.py, and each way of decoding (core/decodings.py)
DECLARED_BY = dict({"eval.py": evaluation_flags, "core/training.py": add_dtype_flag},
                   **{f"decoding {n}": (lambda p, k=kind: k.add_flags(p.add_argument_group(k.title)))
                      for n, kind in DECODINGS.items()})


def get_args(argv=None):
    return parse_args(parser(DECLARED_BY, __doc__), argv)


def progress_line(what, stream=None):
    """A progress report: one line rewritten in place on a terminal; in a log file (not a terminal)
    a line at every tenth of the work, so that the file does not hold one endless line."""
    stream = stream or sys.stderr
    tty = stream.isatty()
    shown = [-1]

    def show(done, total):
        if tty:
            print(f"\r  {what}: {done}/{total}", end="" if done < total else "\n", file=stream, flush=True)
        elif 10 * done // max(1, total) > shown[0] or done == total:
            shown[0] = 10 * done // max(1, total)
            print(f"  {what}: {done}/{total}", file=stream, flush=True)
    return show


def pick_checkpoints(paths):
    """The checkpoint files: a directory stands for every best.pt under it (one per run)."""
    out = []
    for path in paths:
        if not os.path.exists(path):
            raise UserError(f"checkpoint not found: {path}" + (
                " (finetune.py writes its runs under checkpoints/: fine-tune a model first)" if path == "checkpoints"
                else ""))
        if not os.path.isdir(path):
            out.append(path)
            continue
        found = sorted(os.path.join(d, "best.pt") for d, _, files in os.walk(path) if "best.pt" in files)
        if not found:
            raise UserError(f"{path} holds no fine-tuned run (no best.pt under it)")
        print(f"{path}: {len(found)} fine-tuned checkpoint(s): {', '.join(found)}", file=sys.stderr)
        out += found
    return out


def examples(task, args):
    """The examples to evaluate: the split, or with --limit N a sample of N fixed by seed 0."""
    data = load_split(task, args.split, args.data, args.src_field, args.tgt_field, note=lambda msg: None)
    if args.limit:
        data = data.shuffled(seed=0)
        data.sources, data.targets = data.sources[:args.limit], data.targets[:args.limit]
    return data


def data_tag(args):
    """The part of a result file's name that says which examples it scored: the split or the file,
    and the sample."""
    data = args.split if args.data is None else (
        os.path.basename(args.data).split(".")[0] + "-"
        + hashlib.sha1(os.path.abspath(args.data).encode()).hexdigest()[:8])
    return data + (f"-sample{args.limit}" if args.limit else "")


def result_names(path, args, task="summarize", gen=None):
    """(eval json, outputs jsonl) beside the checkpoint, named for it, the data, and how it decodes
    (a classifier decodes nothing: no decoding settings in its names); gen: the settings the row
    decoded with (core/decodings.py), else the flags' first."""
    tag = os.path.splitext(os.path.basename(path).removesuffix(checkpoint.PACKED))[0] + "-" + data_tag(args)
    setting = exit_settings(args)[0] if gen is None else gen.get("exit_rule")
    if setting:  # a threshold sweep keeps each (resolved in main; read off the flags, the checkpoint's own measure)
        tag += f"-exit-{setting[0] or 'own'}" + (f"{setting[1]:g}" if setting[1] is not None else "")
    if task == "classify":
        return (os.path.join(os.path.dirname(os.path.abspath(path)), f"eval-{tag}.json"),
                os.path.join(os.path.dirname(os.path.abspath(path)), f"outputs-{tag}.jsonl"))
    tag += {None: "", True: "-adaptive", False: "-allpasses"}[args.adaptive_stop]
    # a decoding flag away from its default: beam 1 and beam 5 of one checkpoint are two results
    defaults = {a.dest: a.default for a in parser(DECLARED_BY, __doc__)._actions}
    tag += "".join(f"-{short}{getattr(args, name):g}" if isinstance(getattr(args, name), (int, float))
                   else f"-{getattr(args, name)}" for name, short in DECODING_TAGS.items()
                   if getattr(args, name, None) not in (None, defaults[name]))
    out_dir = os.path.dirname(os.path.abspath(path))
    return os.path.join(out_dir, f"eval-{tag}.json"), os.path.join(out_dir, f"outputs-{tag}.jsonl")


def load_model(path, state, device):
    """(model in eval mode on device, its arch, its tokenizer, its labels or None) of a fine-tuned
    checkpoint."""
    task, arch = state["kind"].split("/")[1], arch_of(state, path)
    tok = Tokenizer.from_tensor(state["tokenizer"])
    cfg = ModelConfig.from_dict(state["model_config"])
    labels = Labels(state["labels"]) if task == "classify" else None
    with checkpoint.weights_of(path):
        reads = state.get("args", {}).get("cls_vector")  # None in a classifier saved before the flag: the default
        model = build_model(arch, cfg, len(labels) if labels else None, state.get("elmer"), reads)
        model.load_state_dict(state["model"])
    return model.to(device).eval(), arch, tok, labels


def decoding_settings(args, paths, states):
    """Per checkpoint, the decoding settings of each of its rows (core/decodings.py: ELMER's one per
    exit threshold of a sweep); a classifier's one row decodes nothing."""
    return {p: decoding_of(arch_of(states[p], p)).settings(args, states[p], p)
            if states[p]["kind"] == "finetune/summarize" else [{}] for p in paths}


def summarizer(model, arch, tok, fa, batch_size, gen, stats=None):
    """run(sources, show=None) -> their summaries, decoded with the settings gen."""
    return lambda srcs, show=None: summarize(model, arch, tok, srcs, fa["max_src"], batch_size, show, stats, **gen)


def classifier(model, arch, tok, fa, batch_size, device):
    """run(source id lists, show=None) -> their predicted label ids."""
    def run(srcs_ids, show=None):
        out = []
        for i in range(0, len(srcs_ids), batch_size):
            chunk = srcs_ids[i:i + batch_size]
            b = classify_batch(chunk, [0] * len(chunk), tok, fa["max_src"], sos=ARCHS[arch].classify_sos)
            with torch.no_grad():
                out += predict(model, b.to(device)).tolist()
        return out
    return run


def evaluate_checkpoint(path, state, args, device, dtype=torch.float32, gen=None):
    """The row of one checkpoint decoding with the settings gen, and the generated outputs to write."""
    task = state["kind"].split("/")[1]
    model, arch, tok, labels = load_model(path, state, device)
    fa = state["args"]
    data = examples(task, args)
    sources, targets = data.sources, data.targets
    row = dict(model=path, arch=arch, task=task, params_M=round(count_parameters(model) / 1e6, 2), n=len(sources),
               skipped=data.skipped)
    out_dir = os.path.dirname(os.path.abspath(path))
    outputs = None

    if task == "summarize":
        kind, stats = decoding_of(arch), {}
        row["decoding"] = kind.label(gen)
        run = summarizer(model, arch, tok, fa, args.batch_size, gen, stats)
        with autocast(device, dtype):
            preds = run(sources, progress_line(f"generating with {os.path.basename(out_dir)}"))
        row.update(kind.report(model, arch, gen, stats, path))
        row.update(rouge(preds, targets))
        outputs = [dict(prediction=p, reference=t, source=s) for s, t, p in zip(sources, targets, preds)]
    else:
        ids = tok.encode(sources)
        run = classifier(model, arch, tok, fa, args.batch_size, device)
        gold = labels.ids(targets)
        if -1 in gold:
            print(f"note: {gold.count(-1)} examples of {data.origin} have labels {path} never saw in training "
                  f"(counted as wrong)", file=sys.stderr)
        with autocast(device, dtype):
            pred = run(ids)
        row["accuracy"] = 100 * sum(p == g for p, g in zip(pred, gold)) / len(gold)
        row["macro_f1"] = 100 * macro_f1(pred, gold, len(labels))
        # per example, as summarization's: reproduce/significance.py pairs two models' accuracies on them
        outputs = [dict(prediction=labels.names[p], reference=t, source=s, task="classify")
                   for s, t, p in zip(sources, targets, pred)]
        sources = ids
    with torch.no_grad(), autocast(device, dtype):
        row["latency_ms"], row["samples_per_s"] = speed(device, run, sources, args.batch_size, args.latency_samples)
    return row, outputs


def majority_row(targets):
    """Classification's floor, as LEAD is summarization's: the most frequent label of the evaluated
    examples for every one of them, the best any model that ignores its input can score there."""
    names = sorted(set(targets))
    gold = [names.index(t) for t in targets]
    top = max(range(len(names)), key=gold.count)
    return dict(model="majority class", arch="-", params_M=0, n=len(targets),
                accuracy=100 * gold.count(top) / len(gold),
                macro_f1=100 * macro_f1([top] * len(gold), gold, len(names)))


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
        files.append((outputs_path, "".join(json.dumps(o, ensure_ascii=False) + "\n" for o in outputs)))
    for name, text in files:
        write_atomically(name, text)


def write_atomically(path, text):
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def markdown(rows):
    cols = ["model", "arch", "decoding", "iterations", "params_M", "n", "rouge1", "rouge2", "rougeL", "accuracy",
            "macro_f1",
            "exit_measure", "exit_threshold", "mean_exit", "exit_frac", "entropy_p50", "entropy_p5", "dec_flops",
            "latency_ms", "samples_per_s"]
    cols = [c for c in cols if any(c in r for r in rows)]
    fmt = lambda v: f"{v:.2f}" if isinstance(v, float) else str(v)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(fmt(r.get(c, "")) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def check_decoding(args, paths, states, also=None):
    """A decoding flag that applies to none of the checkpoints is named (eval.py changes no model and
    each row records the decoding it used: a note, unless its decoding says so), and every length
    fits the positions of each model. also: more of refuse_unused's table."""
    for kind in DECODINGS.values():
        kind.check(args)
    used = {decoding_of(arch_of(states[p], p)).name for p in paths if states[p]["kind"] == "finetune/summarize"}
    applies = {flag: (kind.name in used, kind.needs, flag not in kind.strict)
               for kind in DECODINGS.values() for flag in kind.flags}
    applies["max_len"] = (any(DECODINGS[name].bounded for name in used),
                          "to summarization checkpoints other than elmer (whose length is its --dec-len)", True)
    refuse_unused(args, dict(applies, **(also or {})), notes_to=sys.stderr)
    for path in paths:
        state, fa = states[path], states[path]["args"]
        arch = arch_of(state, path)
        if state["kind"] != "finetune/summarize" or not decoding_of(arch).bounded:
            continue
        max_tgt = fa.get("max_tgt", 24)
        if args.max_len is None and args.min_len > max_tgt:
            raise UserError(f"--min-len {args.min_len} is above {path}'s --max-tgt {max_tgt}, the default --max-len: "
                            f"give --max-len too")
        max_len, room = args.max_len or max_tgt, ModelConfig.from_dict(state["model_config"]).max_positions
        if ARCHS[arch].one_table:  # source and target share one position table
            check_positions(f"{path}: its --max-src {fa['max_src']} + --max-len {max_len}", fa["max_src"] + max_len,
                            room, f"use --max-len <= {room - fa['max_src']}")
        else:
            check_positions(f"{path}: --max-len {max_len}", max_len, room, f"use --max-len <= {room}")


def check_settings(args, paths, states):
    """Before the first generation: the decoding flags (check_decoding), the data flags, and that
    every result can be written."""
    check_decoding(args, paths, states, also=dict(
        src_field=(args.data is not None, "with --data", True),
        tgt_field=(args.data is not None, "with --data", True),
        split=(args.data is None, "without --data (the embedded corpus's splits)", True)))
    for path in paths:
        out_dir = os.path.dirname(os.path.abspath(path))
        if not os.access(out_dir, os.W_OK):
            raise UserError(f"cannot write the results beside {path} ({out_dir} is not writable)")


# -----------------------------------------------------------------------------
# --text: the outputs of the documents given, nothing else

def documents(text):
    """--text's documents: the one given, or with - each line of stdin."""
    if text != "-":
        if not text.strip():
            raise UserError("--text is empty: give a document (or - to read one per line from stdin)")
        return [text]
    docs = sys.stdin.read().splitlines()
    if not docs:
        raise UserError("--text -: stdin holds no document (one per line)")
    empty = [i + 1 for i, d in enumerate(docs) if not d.strip()]
    if empty:
        raise UserError(f"--text -: line {empty[0]} of stdin is empty ({len(empty)} empty line(s)): one document "
                        f"per line")
    return docs


def answer(args, device):
    """Each document's output (a summary, or a classifier's label) on a line of stdout."""
    refuse_unused(args, {k: (False, "without --text (an evaluation over a data set)") for k in EVALUATION_ONLY})
    paths = pick_checkpoints(args.checkpoints)
    if len(paths) != 1:
        raise UserError(f"--text decodes with one checkpoint, not {len(paths)}: name one")
    path = paths[0]
    state = checkpoint.load(path, kinds=("finetune/",))
    check_decoding(args, [path], {path: state})
    gens = decoding_settings(args, [path], {path: state})[path]
    if len(gens) > 1:
        raise UserError(f"--text prints one output per document: the flags give a sweep of {len(gens)} settings, "
                        f"give one")
    docs = documents(args.text)
    model, arch, tok, labels = load_model(path, state, device)
    with torch.no_grad(), autocast(device, resolve_dtype(args.dtype, device)):
        if state["kind"] == "finetune/summarize":
            outs = summarizer(model, arch, tok, state["args"], args.batch_size, gens[0])(docs)
        else:
            outs = [labels.names[i] for i in classifier(model, arch, tok, state["args"], args.batch_size,
                                                        device)(tok.encode(docs))]
    for out in outs:
        print(" ".join(out.split()), flush=True)
    return outs


# -----------------------------------------------------------------------------
# the script: --text, or an evaluation of every checkpoint

@main_guard
def main(argv=None):
    args = get_args(argv)
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          "cpu" if args.device == "auto" else args.device)
    if args.text is not None:
        return answer(args, device)
    # read and check every input before the first (long) evaluation
    paths = pick_checkpoints(args.checkpoints)
    states = {path: checkpoint.load(path, kinds=("finetune/",)) for path in paths}
    sizes = [len(load_split(task, args.split, args.data, args.src_field, args.tgt_field, note=lambda msg: None))
             for task in sorted({state["kind"].split("/")[1] for state in states.values()})]
    past = args.limit if args.limit and args.limit >= max(sizes) else None
    if past:  # no sample: the whole split, and its files named so
        print(f"note: --limit {args.limit} is not under the {max(sizes)} examples there are: all of them are evaluated")
    dtype = resolve_dtype(args.dtype, device)
    # the run's config, frozen: what --limit, --dtype auto and --device auto resolved to (each result records it)
    args = args.resolved(limit=None if past else args.limit, dtype_run=str(dtype).split(".")[-1],
                         device_run=device.type)
    check_settings(args, paths, states)
    plans = decoding_settings(args, paths, states)
    for task in sorted({state["kind"].split("/")[1] for state in states.values()}):  # said once, not per checkpoint
        load_split(task, args.split, args.data, args.src_field, args.tgt_field)
    print(args.line(), file=sys.stderr)  # every input checked: the config the rows below record
    rows = []
    for path in paths:  # each row's files on disk at once: a later failure loses none of them
        for gen in plans[path]:  # a sweep: one row each
            row, outputs = evaluate_checkpoint(path, states[path], args, device, dtype, gen)
            write_results(path, row, outputs, args, gen)
            rows.append(row)
    if not args.no_lead and any(r["task"] == "summarize" for r in rows):
        data = examples("summarize", args)
        sources, targets = data.sources, data.targets
        where = os.path.dirname(os.path.abspath(next(r["model"] for r in rows if r["task"] == "summarize")))
        for name, words in (("LEAD-8", 8), ("LEAD-1sent", None)):
            preds = [lead(s, words) for s in sources]
            rows.append(dict(model=name, arch="-", params_M=0, n=len(sources), **rouge(preds, targets)))
            # its outputs beside the first summarizer's, so that significance.py pairs "beats LEAD"
            write_atomically(os.path.join(where, f"outputs-{name}-{data_tag(args)}.jsonl"),
                             "".join(json.dumps(dict(source=s, prediction=p, reference=t), ensure_ascii=False) + "\n"
                                     for s, p, t in zip(sources, preds, targets)))
    if not args.no_lead and any(r.get("task") == "classify" for r in rows):
        rows.append(majority_row(examples("classify", args).targets))
    data = f"{args.split} split" if args.data is None else args.data
    sample = f"a sample of {args.limit}, seed 0" if args.limit else f"all of them; --limit {past} is past them" \
        if past else "all of them"
    print(f"\n{data}: {min(max(sizes), args.limit or max(sizes))} examples ({sample}), {device.type} "
          f"({str(dtype)[6:]}), beam {args.beam}\n")
    print(markdown(rows))
    return rows


if __name__ == "__main__":
    main()
