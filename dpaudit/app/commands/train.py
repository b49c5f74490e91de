"""``dpaudit train``: train a defense and write the released model (``--defense NAME --help`` lists its hyperparameters)."""

from __future__ import annotations

from dpaudit.accounting.spec import check_unit_epsilon, validate_epsilon
from dpaudit.app.commands._common import check_memory, check_target_epsilon, fmt, parse_delta, threads_for_load
from dpaudit.app.commands._dataset_args import (
    DATASET_HELP,
    SPLIT_HELP,
    add_dataset_option_argument,
    check_label_domain_first,
)
from dpaudit.app.names import builtin_units, check_defense_name
from dpaudit.data.split_specs import parse_split_spec
from dpaudit.errors import DPAuditError
from dpaudit.seeds import seed_argument


def _defense_help(name: str) -> str:
    from dpaudit.training.registry import get_defense

    cls = get_defense(name)
    lines = [
        f"{cls.name}: {cls.summary}",
        f"privacy unit: {cls.unit or 'none (non-private)'}",
        "hyperparameters (--set KEY=VALUE):",
    ]
    for key, declared, default, text in cls.describe_hyperparameters():
        lines.append(f"  {f'{key} ({declared}, default {default!r})':<48} {text}".rstrip())
    return "\n".join(lines)


def cmd_train(args) -> int:
    """Train a defense on a dataset and write the released model folder (``--out``), or print a defense's hyperparameters (``--help-defense``).

    Args:
        args: the parsed command line (:class:`argparse.Namespace`) of ``dpaudit train``.

    Returns:
        The process exit status (0: success).

    Raises:
        DPAuditError: bad input, said in one line before any work (the CLI prints it and exits with 2).
    """
    if not args.help_defense:
        # names and required arguments first: refused in a fraction of a second, before torch loads
        for required in ("defense", "dataset", "out"):
            if getattr(args, required) is None:
                raise DPAuditError(f"train needs --{required}")
        check_defense_name(args.defense)
        epsilon = validate_epsilon(args.epsilon)
        check_target_epsilon(epsilon)  # ε, δ and the split's syntax read no data:
        parse_delta(args.delta)  # refused here, before torch is imported
        if args.split is not None:
            parse_split_spec(args.split)
        # what the defense's source declares (its privacy unit): a non-private defense takes only
        # ε = ∞, and trains on a graph file only once its label domain is declared
        units = builtin_units()
        if args.defense in units:
            check_unit_epsilon(args.defense, units[args.defense], epsilon)
            check_label_domain_first(args.dataset, args.dataset_option, [units[args.defense]])
    from dpaudit.app.commands._dataset_args import (
        check_declarations,
        parse_dataset_options,
        warn_if_membership_not_random,
    )
    from dpaudit.app.outputs import check_output_dir, output_lock
    from dpaudit.app.pipeline import train
    from dpaudit.data.datasets import load_dataset
    from dpaudit.data.splits import make_split
    from dpaudit.training.defense import parse_overrides
    from dpaudit.training.registry import available_defenses, get_defense

    if args.help_defense:
        if not args.defense:
            args.parser.print_help()
            print("\ndefenses (see `dpaudit train --defense NAME --help`): " + ", ".join(available_defenses()))
            return 0
        print(_defense_help(args.defense))
        return 0
    for required in ("defense", "dataset", "out"):
        if getattr(args, required) is None:
            raise DPAuditError(f"train needs --{required}")
    cls = get_defense(args.defense)
    overrides = parse_overrides(cls.hyperparameters_class, args.set or [])
    args.delta = parse_delta(args.delta)
    noise = "seeded" if args.reproducible_noise else None
    defense = cls(
        epsilon=args.epsilon,
        delta=args.delta,
        seed=args.seed,
        device=args.device,
        noise=noise,
        force_delta=args.force_delta,
        **overrides,
    )
    check_target_epsilon(defense.epsilon)
    options = parse_dataset_options(args.dataset_option, args.dataset, declaring=False)
    # the label domain, δ, declared sizes and the defense's own needs, all in one line
    check_declarations(args.dataset, options, [defense], args.delta)
    from dpaudit.app.workflows.audit import format_seconds
    from dpaudit.app.workflows.audit.plan import guess_train_seconds
    from dpaudit.progress import load_factor, load_note, log, log_progress

    with output_lock(args.out):  # a second `train --out` the same folder refuses, naming this one
        check_output_dir(args.out, "model", force=args.force)
        dataset = load_dataset(args.dataset, root=args.data_root, **options)
        check_memory(defense, dataset.num_nodes, dataset.num_features)
        split = make_split(dataset, args.split, args.seed)
        defense.resolve_delta(dataset, split)  # the δ rule (δ < 1/declared units), before training
        warn_if_membership_not_random(dataset, split, args.argv)
        # as many torch threads as the load leaves cores idle (a busy machine makes extra threads spin);
        # seeded noise keeps torch's own count, so that a replay runs as the first run did
        with threads_for_load(keep=args.reproducible_noise) as threads:
            # said before any training: a guess from the graph's size and the defense's declared cost,
            # corrected for the machine's load; the progress lines then follow the steps
            seconds = guess_train_seconds(defense, dataset.num_nodes)
            log.info(
                "training %s on %s (%d nodes) -> %s: about %s here (%s, %d torch thread(s); about %s on an idle "
                "machine, a guess from the graph's size until the steps show)",
                args.defense,
                dataset.name,
                dataset.num_nodes,
                args.out,
                format_seconds(seconds * load_factor(threads=threads)),
                load_note(),
                threads,
                format_seconds(seconds),
            )
            # a bar on a terminal; otherwise a progress line every 30 s
            with log_progress(every=30.0):
                # the defense built (ε parsed and checked) above: pipeline.train parses nothing again;
                # check_output_dir refused a released model there unless --force
                result = train(defense, dataset, split=args.split, overrides=overrides, out=args.out, overwrite=True)
        m = result.metrics
        print(
            f"{m['defense']} on {m['dataset']}: test accuracy {fmt(m['test_accuracy'])}, "
            f"train accuracy {fmt(m['train_accuracy'])}, {result.model.privacy.summary()}, "
            f"{m['train_seconds']:.1f}s -> {args.out}"
        )
    return 0


def add_parser(subparsers) -> None:
    """Add the ``train`` subcommand and its options to ``subparsers``.

    Args:
        subparsers: the ``dpaudit`` parser's subparsers action (``add_subparsers()``).
    """
    p = subparsers.add_parser("train", help="train a defense and write the released model", add_help=False)
    p.add_argument(
        "-h", "--help", dest="help_defense", action="store_true", help="with --defense: list its hyperparameters"
    )
    p.add_argument("--defense")
    p.add_argument("--dataset", help=DATASET_HELP)
    add_dataset_option_argument(p)
    p.add_argument("--epsilon", default="inf", help="target ε (a positive number or inf)")
    p.add_argument("--delta", default="auto", help="δ in (0, 1) or auto (a power of ten below 1/#declared units)")
    p.add_argument(
        "--force-delta",
        action="store_true",
        help="accept a --delta at or above 1/n (n = the declared protected units), which is otherwise refused",
    )
    p.add_argument("--seed", type=seed_argument, default=0, help="0 <= seed < 2**31")
    p.add_argument(
        "--reproducible-noise",
        action="store_true",
        help="draw the privacy noise from --seed (research and tests only): the card records it, not a release",
    )
    p.add_argument("--split", default=None, help=SPLIT_HELP)
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--data-root", default=None)
    p.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="override a hyperparameter (repeatable; `--defense NAME --help` lists each with its range, default and description)",
    )
    p.add_argument("--out", help="released-model folder to write")
    p.add_argument("--force", action="store_true", help="replace a released model in --out, or write among other files")
    p.set_defaults(func=cmd_train, parser=p)
