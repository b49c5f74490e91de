"""``dpaudit canary``: train K runs with graph-native canaries, score them, write ε lower bounds.

    dpaudit canary --defense gap-edp --dataset csbm --epsilon 1 --kind edge --canaries 200 \\
        --runs 1 --set epochs=30 --out gap-edp-edge.json
    dpaudit canary --defense mlp-dp --dataset cora --epsilon 4 --kind gradient --canaries 2000 --out g.json
    dpaudit canary --train train.py:fit --dataset cora --epsilon 1 --delta 1e-5 --kind node --out mine.json

``--train FILE.py:FUNCTION`` (or ``package.module:FUNCTION``) audits **your own training
function** ``fit(dataset, split)`` against the claim ``--epsilon``/``--delta``/``--unit``
(:class:`dpaudit.training.user_fit.FitFunction`). Loading it runs that file's code: it is your
training code, and training it is what you asked for.

Everything is checked before any training (one line on stderr, exit 2): names, ε/δ, kind,
counts, every ``--set`` against the defense's hyperparameters and the memory of the device,
``--design`` keys, the output file; with ``--train``, the file, the function and its signature,
before any dataset is loaded. The audit's power plan is printed before the first training.
Ctrl-C keeps the finished runs (the JSON is written with ``"partial": true``).
"""

from __future__ import annotations

import inspect

from dpaudit.errors import ConfigurationError, DPAuditError

_DESIGN_HELP = (
    "canary design (repeatable): node: feature=rare|sparse|gaussian|copy, support=INT, scale=FLOAT, wires=INT, signed=true|false; "
    "edge: min_distance=INT, endpoints=low-degree|random, endpoint_uses=1..6 (canaries per endpoint); gradient: module=mlp|encoder|classifier|gnn|rows, "
    "observe=iterates|final, claim=module|total"
)


def _design_options(kind: str, items: list[str]) -> dict:
    from attacks.canary import draw_edge_canaries, draw_node_canaries
    from dpaudit.assignments import parse_literal, split_assignment

    if kind == "gradient":
        from dpaudit.app.workflows.gradient_canary import DESIGN_KEYS

        known = set(DESIGN_KEYS)
    else:
        fn = draw_node_canaries if kind == "node" else draw_edge_canaries
        known = {p.name for p in inspect.signature(fn).parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    out = {}
    for item in items or []:
        _, key, value = split_assignment(item, "--design")
        if key not in known:
            raise ConfigurationError(f"--design {key}: unknown for {kind} canaries; known: {', '.join(sorted(known))}")
        out[key] = parse_literal(value)
    return out


#: bytes each canary takes at least, besides a node canary's feature row: its score, label, membership
#: coin and endpoints in float64 arrays (issue 49: 10**8 canaries failed allocating 23.8 GiB ≈ 255 B each)
CANARY_BYTES = 256


def check_canary_memory(canaries: int, kind: str, num_features: int, device) -> None:
    """Refuse, before any work and in one line, ``--canaries`` whose arrays cannot fit in the
    device's memory (:func:`dpaudit.runtime.device_memory`), as ``--set`` widths are refused.

    Args:
        canaries: the number of canaries per run.
        kind: ``node`` (each also a float32 feature row), ``edge`` or ``gradient``.
        num_features: the dataset's feature width.
        device: the torch device training runs on.

    Raises:
        ConfigurationError: the canaries' lower-bound footprint exceeds the device's memory.
    """
    from dpaudit.runtime import device_memory

    memory = device_memory(device)
    need = canaries * (CANARY_BYTES + (4 * num_features if kind == "node" else 0))
    if memory is not None and need > memory:
        raise ConfigurationError(
            f"--canaries {canaries}: at least {need / 2**30:.1f} GiB for the canaries alone, more than the "
            f"{memory / 2**30:.1f} GiB of this machine; lower --canaries"
        )


def _print_plan(plan: dict) -> None:
    from dpaudit.app.workflows.canary import plan_lines

    print("\n".join(plan_lines(plan)), flush=True)


def cmd_canary_train(args) -> int:
    """``--train FILE.py:FUNCTION``: the user's fit function against their claim.

    Args:
        args: the parsed command line (:class:`argparse.Namespace`) of ``dpaudit canary --train``.

    Returns:
        The process exit status (0: success).

    Raises:
        DPAuditError: bad input, said in one line before any work (the CLI prints it and exits with 2).
    """
    from dpaudit.app.commands._common import check_target_epsilon, parse_delta
    from dpaudit.app.commands._dataset_args import check_declarations, parse_dataset_options
    from dpaudit.app.outputs import check_output_file
    from dpaudit.app.workflows.canary import canary_audit, check_fit_request, summary_lines
    from dpaudit.data.datasets import load_dataset
    from dpaudit.data.splits import make_split
    from dpaudit.training.user_fit import load_fit_function

    for required in ("dataset", "kind", "out"):
        if getattr(args, required) is None:
            raise DPAuditError(f"canary needs --{required}")
    if args.set:
        raise DPAuditError("--set sets a registered defense's hyperparameters; a --train function sets its own")
    if args.kind == "gradient":
        raise DPAuditError(
            "--train is audited with --kind node or edge (gradient canaries go inside a registered DP-SGD defense)"
        )
    if args.epsilon is None:
        raise DPAuditError("canary --train needs --epsilon: the ε you claim for your training (inf: no claim)")
    args.delta = parse_delta(args.delta)
    design = _design_options(args.kind, args.design)
    fit = load_fit_function(args.train)  # imports (runs) the user's file: by their request
    probe = check_fit_request(
        fit, args.epsilon, args.kind, args.canaries, args.runs, args.unit, args.delta, args.device, args.seed, design
    )
    check_target_epsilon(probe.epsilon)
    options = parse_dataset_options(args.dataset_option, args.dataset, declaring=False)
    check_declarations(args.dataset, options, [probe], args.delta)
    check_output_file(args.out, "canary", force=args.force)
    dataset = load_dataset(args.dataset, root=args.data_root, **options)
    make_split(dataset, args.split, args.seed)
    result = canary_audit(
        fit=fit,
        dataset=dataset,
        epsilon=args.epsilon,
        kind=args.kind,
        unit=args.unit,
        canaries=args.canaries,
        runs=args.runs,
        split=args.split,
        seed=args.seed,
        delta=args.delta,
        device=args.device,
        design=design,
        out=args.out,
        on_plan=_print_plan,
    )
    print("\n".join(summary_lines(result)))
    print(f"-> {args.out}")
    return 0


def cmd_canary(args) -> int:
    """Run a canary audit of a registered defense (``--defense``) or of the user's own fit function (``--train``: :func:`cmd_canary_train`) and write its JSON result.

    Args:
        args: the parsed command line (:class:`argparse.Namespace`) of ``dpaudit canary``.

    Returns:
        The process exit status (0: success).

    Raises:
        DPAuditError: bad input, said in one line before any work (the CLI prints it and exits with 2).
    """
    if args.train is not None:
        return cmd_canary_train(args)
    if args.unit is not None:
        raise DPAuditError("--unit states the claim of a --train function; a defense declares its own unit")
    from dpaudit.app.names import check_defense_name

    check_defense_name(args.defense)  # before torch loads (a fraction of a second)
    from dpaudit.accounting.spec import validate_epsilon
    from dpaudit.app.commands._common import check_memory, check_target_epsilon, parse_delta
    from dpaudit.data.split_specs import parse_split_spec

    if args.epsilon is not None:  # ε, δ and the split's syntax read no data: refused before torch
        check_target_epsilon(validate_epsilon(args.epsilon))
    parse_delta(args.delta)
    if args.split is not None:
        parse_split_spec(args.split)
    from dpaudit.app.commands._dataset_args import check_declarations, parse_dataset_options
    from dpaudit.app.outputs import check_output_file
    from dpaudit.app.workflows.canary import canary_audit, check_canary_request, summary_lines
    from dpaudit.data.datasets import load_dataset
    from dpaudit.data.splits import make_split
    from dpaudit.training.defense import parse_overrides

    if args.defense is None:
        raise DPAuditError("canary needs --defense NAME or --train FILE.py:FUNCTION")
    for required in ("dataset", "kind", "out"):
        if getattr(args, required) is None:
            raise DPAuditError(f"canary needs --{required}")
    from dpaudit.training.registry import get_defense

    cls = get_defense(args.defense)
    if args.epsilon is None:
        if cls.unit is not None:
            raise DPAuditError(f"canary needs --epsilon (the target ε of {args.defense})")
        args.epsilon = "inf"  # a non-private defense: no target, ε = ∞
    overrides = parse_overrides(cls.hyperparameters_class, args.set or [])
    args.delta = parse_delta(args.delta)
    design = _design_options(args.kind, args.design)
    check_canary_request(
        args.defense,
        args.epsilon,
        args.kind,
        args.canaries,
        args.runs,
        overrides,
        args.delta,
        args.device,
        args.seed,
        design,
    )
    defense = cls(epsilon=args.epsilon, delta=args.delta, seed=args.seed, device=args.device, **overrides)
    check_target_epsilon(defense.epsilon)
    options = parse_dataset_options(args.dataset_option, args.dataset, declaring=False)
    check_declarations(args.dataset, options, [defense], args.delta)  # everything missing, in one line
    check_output_file(args.out, "canary", force=args.force)
    dataset = load_dataset(args.dataset, root=args.data_root, **options)
    check_memory(defense, dataset.num_nodes, dataset.num_features)
    check_canary_memory(args.canaries, args.kind, dataset.num_features, defense.device)
    make_split(dataset, args.split, args.seed)  # a malformed split fails before training
    result = canary_audit(
        args.defense,
        dataset,
        args.epsilon,
        kind=args.kind,
        canaries=args.canaries,
        runs=args.runs,
        overrides=overrides,
        split=args.split,
        seed=args.seed,
        delta=args.delta,
        device=args.device,
        design=design,
        out=args.out,
        on_plan=_print_plan,
    )
    print("\n".join(summary_lines(result)))
    print(f"-> {args.out}")
    return 0


def add_parser(subparsers) -> None:
    """Add the ``canary`` subcommand and its options to ``subparsers``.

    Args:
        subparsers: the ``dpaudit`` parser's subparsers action (``add_subparsers()``).
    """
    from dpaudit.app.commands._dataset_args import DATASET_HELP, SPLIT_HELP, add_dataset_option_argument
    from dpaudit.seeds import seed_argument

    p = subparsers.add_parser(
        "canary",
        help="audit a defense, or your own training function, with node, edge or DP-SGD gradient canaries inserted by "
        "fair coins (JSON ε lower bounds)",
    )
    recipe = p.add_mutually_exclusive_group()
    recipe.add_argument("--defense", help="a registered defense to audit")
    recipe.add_argument(
        "--train",
        metavar="FILE.py:FUNCTION",
        help="audit your own training function fit(dataset, split) -> trained torch module (also "
        "package.module:FUNCTION) against the claim --epsilon/--delta/--unit. Loading it RUNS that file's code "
        "(your training code, as you asked): only name code you trust",
    )
    p.add_argument("--dataset", help=DATASET_HELP)
    add_dataset_option_argument(p)
    p.add_argument(
        "--epsilon",
        help="target ε of a private defense (a positive number or inf; a non-private one needs none); with --train, "
        "the ε you claim (inf: no claim)",
    )
    p.add_argument(
        "--unit",
        choices=["node", "edge"],
        help="with --train: the privacy unit of your claim (default: the canaries' --kind); edge canaries test a "
        "node-level claim by group privacy (2ε)",
    )
    p.add_argument(
        "--kind",
        choices=["node", "edge", "gradient"],
        help="node canaries (crafted nodes), edge canaries (node pairs) or gradient canaries (white-box Dirac "
        "gradients inserted into DP-SGD, scored from every iterate)",
    )
    p.add_argument("--canaries", type=int, default=200, help="canaries per run (default 200)")
    p.add_argument("--runs", type=int, default=1, help="independent trainings, fresh coins each (default 1)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="a defense hyperparameter (repeatable)")
    p.add_argument("--design", action="append", metavar="KEY=VALUE", help=_DESIGN_HELP)
    p.add_argument("--split", default=None, help=SPLIT_HELP)
    p.add_argument("--delta", default="auto", help="δ in (0, 1) or auto (resolved once on the base graph)")
    p.add_argument("--seed", type=seed_argument, default=0, help="0 <= seed < 2**31")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--data-root", default=None)
    p.add_argument("--out", help="where to write the audit JSON")
    p.add_argument("--force", action="store_true", help="replace --out even if it is not an earlier canary audit")
    p.set_defaults(func=cmd_canary)
