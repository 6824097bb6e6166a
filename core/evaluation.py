"""What eval.py evaluates with: a fine-tuned checkpoint's model and the function that decodes with
it (load_decoder), one checkpoint's row (quality, then speed), the baselines' rows (LEAD, the
majority class), and --text's outputs (answer).

    ck = checkpoint.read_finetuned(path)                   # core/checkpoint.py
    row, outputs = evaluate_checkpoint(ck, data.sample(config.limit), config, device, dtype, gen)
"""

import os
import sys

import torch

from . import checkpoint
from .architectures import ARCHS, build_model
from .classify import classifier
from .decodings import decoding_of
from .errors import UserError
from .generation import summarizer
from .metrics import label_scores, majority_scores, rouge
from .model import count_parameters
from .progress import progress_line
from .results import write_baseline
from .tasks import lead, load_split
from .timing import speed
from .tokenizer import Tokenizer
from .training import autocast


def examples(task, args):
    """The examples an evaluation with these flags scores (the split, or a sample of --limit)."""
    return load_split(task, args.split, args.data, args.src_field, args.tgt_field, note=lambda msg: None).sample(
        args.limit
    )


def load_decoder(ck, device, dtype, batch_size, gen, stats=None):
    """(model in eval mode on device, its parameter count, its tokenizer, run) of a
    checkpoint.Finetuned: run(sources, progress=None) is a summarizer's summaries of texts decoded
    with the settings gen, or a classifier's label ids of token-id lists, its forward passes in the
    compute dtype (core/training.py's autocast)."""
    tok = Tokenizer.from_tensor(ck.state["tokenizer"])
    fa = ck.state["args"]
    with checkpoint.weights_of(ck.path):
        reads = fa.get("cls_vector")  # None in a classifier saved before the flag: the default
        model = build_model(ck.arch, ck.cfg, len(ck.labels) if ck.labels else None, ck.state.get("elmer"), reads)
        model.load_state_dict(ck.state["model"])
    params = count_parameters(model)
    model = model.to(device).eval()
    if ck.task == "summarize":
        decode = summarizer(model, ck.arch, tok, fa["max_src"], batch_size, gen, stats)
    else:
        decode = classifier(model, tok, fa["max_src"], batch_size, device, ARCHS[ck.arch].classify_sos)

    def run(sources, progress=None):
        with autocast(device, dtype):
            return decode(sources, progress)

    return model, params, tok, run


# -----------------------------------------------------------------------------
# a checkpoint's row, and the baselines'


def evaluate_checkpoint(ck, data, args, device, dtype=torch.float32, gen=None):
    """The row of one checkpoint (a checkpoint.Finetuned) on the examples data, decoding with the
    settings gen, and the generated outputs to write."""
    stats = {}
    model, params, tok, run = load_decoder(ck, device, dtype, args.batch_size, gen, stats)
    sources, targets = data.sources, data.targets
    row = dict(
        model=ck.path,
        arch=ck.arch,
        task=ck.task,
        params_M=round(params / 1e6, 2),
        n=len(sources),
        skipped=data.skipped,
    )
    if ck.task == "summarize":
        kind = decoding_of(ck.arch)
        row["decoding"] = kind.label(gen)
        show = progress_line(f"generating with {os.path.basename(os.path.dirname(os.path.abspath(ck.path)))}")
        preds = run(sources, show)
        row |= kind.report(model, ck.arch, gen, stats, ck.path) | rouge(preds, targets)
        outputs = [dict(prediction=p, reference=t, source=s) for s, t, p in zip(sources, targets, preds)]
    else:
        sources, gold = tok.encode(sources), ck.labels.ids(targets)
        if -1 in gold:
            print(
                f"note: {gold.count(-1)} examples of {data.origin} have labels {ck.path} never saw in training "
                f"(counted as wrong)",
                file=sys.stderr,
            )
        pred = run(sources)
        row |= label_scores(pred, gold, len(ck.labels))
        # per example, as summarization's: reproduce/significance.py pairs two models' accuracies on them
        outputs = [
            dict(prediction=ck.labels.names[p], reference=t, source=s, task="classify")
            for s, t, p in zip(data.sources, targets, pred)
        ]
    row["latency_ms"], row["samples_per_s"] = speed(device, run, sources, args.batch_size, args.latency_samples)
    return row, outputs


def baseline_rows(splits, cks, args):
    """The rows of what ignores (most of) the input, on the examples the checkpoints are scored on:
    summarization's LEAD-8 (the first 8 words) and LEAD-1sent (the first sentence), their outputs
    beside the first summarizer's files so that reproduce/significance.py pairs "beats LEAD"; and
    classification's floor, the majority class of the examples predicted for every one of them."""
    rows = []
    if "summarize" in splits:
        data = splits["summarize"].sample(args.limit)
        where = os.path.dirname(os.path.abspath(next(ck.path for ck in cks if ck.task == "summarize")))
        for name, words in (("LEAD-8", 8), ("LEAD-1sent", None)):
            preds = [lead(s, words) for s in data.sources]
            outputs = [dict(source=s, prediction=p, reference=t) for s, p, t in zip(data.sources, preds, data.targets)]
            write_baseline(where, name, outputs, args)
            rows.append(dict(model=name, arch="-", params_M=0, n=len(data.sources), **rouge(preds, data.targets)))
    if "classify" in splits:
        targets = splits["classify"].sample(args.limit).targets
        rows.append(dict(model="majority class", arch="-", params_M=0, n=len(targets), **majority_scores(targets)))
    return rows


# -----------------------------------------------------------------------------
# --text: the outputs of the documents given, nothing else


def answer(text, cks, plans, device, dtype, batch_size):
    """Each document of --text's (documents) output on a line of stdout, a summary or a classifier's
    label, decoded by the one checkpoint of cks with its one decoding setting of plans (eval.py's
    get_args refuses the flags of an evaluation over a data set)."""
    if len(cks) != 1:
        raise UserError(f"--text decodes with one checkpoint, not {len(cks)}: name one")
    ck, gens = cks[0], plans[cks[0].path]
    if len(gens) > 1:
        raise UserError(
            f"--text prints one output per document: the flags give a sweep of {len(gens)} settings, give one"
        )
    docs = documents(text)
    _, _, tok, run = load_decoder(ck, device, dtype, batch_size, gens[0])
    outs = run(docs) if ck.task == "summarize" else [ck.labels.names[i] for i in run(tok.encode(docs))]
    for out in outs:
        print(" ".join(out.split()), flush=True)
    return outs


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
        raise UserError(
            f"--text -: line {empty[0]} of stdin is empty ({len(empty)} empty line(s)): one document per line"
        )
    return docs
