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

import sys


from core import checkpoint
from core.decodings import DECODINGS, decoding_plans
from core.distributed import resolve_device, resolve_dtype
from core.errors import main_guard
from core.evaluation import answer, baseline_rows, evaluate_checkpoint
from core.flags import AT_LEAST_1, flag, parser
from core.guards import parse_args, refuse_unused
from core.results import check_writable, markdown, write_results
from core.tasks import load_split
from core.training import add_dtype_flag

# what --text refuses: the flags of an evaluation over a data set
EVALUATION_ONLY = ("data", "split", "src_field", "tgt_field", "limit", "latency_samples", "no_lead")


def evaluation_flags(p):
    """The flags of every evaluation (and of --text, but those EVALUATION_ONLY)."""
    flag(
        p,
        "checkpoints",
        nargs="*",
        default=["checkpoints"],
        help="fine-tuned checkpoints, or directories: every best.pt under them (default: "
        "checkpoints, where finetune.py writes)",
    )
    flag(p, "--data", default=None, help="a .jsonl file to evaluate on (default: the embedded corpus)")
    flag(p, "--split", default="test", choices=["train", "valid", "test"], help="split of the embedded corpus")
    flag(p, "--src-field", default=None)
    flag(p, "--tgt-field", default=None)
    flag(
        p,
        "--limit",
        rule=AT_LEAST_1,
        type=int,
        default=None,
        help="evaluate on N examples only: a sample of the split fixed by a seed, the same for every "
        "checkpoint (the embedded corpus is sorted by package, so its head is not a sample)",
    )
    flag(
        p,
        "--text",
        default=None,
        help="decode this document instead of a data set, or with - each line of stdin: its output "
        "alone, one line each (a summary, or a classifier's label)",
    )
    flag(
        p,
        "--max-len",
        rule=AT_LEAST_1,
        type=int,
        default=None,
        help="generated tokens at most, [EOS] included (default: the fine-tuning's --max-tgt, the "
        "longest target it trained)",
    )
    flag(p, "--batch-size", rule=AT_LEAST_1, type=int, default=64, help="batch for quality and throughput")
    flag(p, "--latency-samples", rule=AT_LEAST_1, type=int, default=20, help="examples timed one by one")
    flag(p, "--no-lead", action="store_true", help="omit the baseline rows (LEAD; classification's majority class)")
    flag(p, "--device", default="auto", choices=["auto", "cpu", "cuda"])


# who declares each flag of the script: its own set, the dtype flag it shares with train.py and
# finetune.py, and each way of decoding (core/decodings.py)
DECLARED_BY = dict(
    {"eval.py": evaluation_flags, "core/training.py": add_dtype_flag},
    **{
        f"decoding {n}": (lambda p, k=kind: k.add_flags(p.add_argument_group(k.title))) for n, kind in DECODINGS.items()
    },
)


def get_args(argv=None):
    """The run's flags, checked and frozen; with --text, those of an evaluation over a data set refused."""
    args = parse_args(parser(DECLARED_BY, __doc__), argv)
    if args.text is not None:
        refuse_unused(args, {k: (False, "without --text (an evaluation over a data set)") for k in EVALUATION_ONLY})
    return args


# -----------------------------------------------------------------------------
# the script: --text, or an evaluation of every checkpoint (each step in core/, called from here)


@main_guard
def main(argv=None):
    args = get_args(argv)
    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype, device)

    # -------------------------------------------------------------------------
    # read and check every input before the first (long) evaluation: the checkpoints and the
    # decoding settings of each one's rows (--text's too), then the data
    cks = checkpoint.read_all_finetuned(args.checkpoints)
    plans = decoding_plans(
        args,
        cks,
        also=dict(
            src_field=(args.data is not None, "with --data", True),
            tgt_field=(args.data is not None, "with --data", True),
            split=(args.data is None, "without --data (the embedded corpus's splits)", True),
        ),
    )
    if args.text is not None:  # the outputs of the documents given, nothing else
        return answer(args.text, cks, plans, device, dtype, args.batch_size)
    held = []  # what the data says (examples left out), said once every input is checked
    splits = {
        task: load_split(task, args.split, args.data, args.src_field, args.tgt_field, note=held.append)
        for task in sorted({ck.task for ck in cks})
    }
    size = max(len(data) for data in splits.values())
    past = args.limit if args.limit and args.limit >= size else None
    if past:  # no sample: the whole split, and its files named so
        print(f"note: --limit {args.limit} is not under the {size} examples there are: all of them are evaluated")
    # the run's config, frozen: what --limit, --dtype auto and --device auto resolved to (each result records it)
    config = args.resolved(
        limit=None if past else args.limit, dtype_run=str(dtype).split(".")[-1], device_run=device.type
    )
    check_writable([ck.path for ck in cks])
    for note in held:
        print(note, file=sys.stderr)
    print(config.line(), file=sys.stderr)  # every input checked: the config the rows below record

    # -------------------------------------------------------------------------
    # a row per checkpoint and decoding setting, its files on disk at once: a later failure loses none
    rows = []
    for ck in cks:
        for gen in plans[ck.path]:  # a sweep: one row each
            row, outputs = evaluate_checkpoint(ck, splits[ck.task].sample(config.limit), config, device, dtype, gen)
            write_results(ck.path, row, outputs, config, gen)
            rows.append(row)
    if not config.no_lead:  # LEAD, the majority class
        rows += baseline_rows(splits, cks, config)

    # -------------------------------------------------------------------------
    # the table
    data = f"{config.split} split" if config.data is None else config.data
    said = (
        f"a sample of {config.limit}, seed 0"
        if config.limit
        else f"all of them; --limit {past} is past them"
        if past
        else "all of them"
    )
    print(
        f"\n{data}: {min(size, config.limit or size)} examples ({said}), {device.type} "
        f"({str(dtype)[6:]}), beam {config.beam}\n"
    )
    print(markdown(rows))
    return rows


if __name__ == "__main__":
    main()
