"""``dpaudit canary``: train K runs with graph-native canaries, score them, write ε lower bounds.

    dpaudit canary --defense gap-edp --dataset csbm --epsilon 1 --kind edge --canaries 200 \\
        --runs 1 --set epochs=30 --out gap-edp-edge.json
    dpaudit canary --defense mlp-dp --dataset cora --epsilon 4 --kind gradient --canaries 2000 --out g.json

Everything is checked before any training (one line on stderr, exit 2): names, ε/δ, kind,
counts, every ``--set`` against the defense's hyperparameters and the memory of the device,
``--design`` keys, the output file. Ctrl-C keeps the finished runs (the JSON is written with
``"partial": true``).
"""

from __future__ import annotations

import inspect

from dpaudit.errors import ConfigurationError, DPAuditError

_DESIGN_HELP = (
    "canary design (repeatable): node: feature=rare|sparse|gaussian|copy, support=INT, scale=FLOAT, wires=INT; "
    "edge: min_distance=INT, endpoints=low-degree|random, endpoint_uses=1..6 (canaries per endpoint); gradient: module=mlp|encoder|classifier|gnn|rows, "
    "observe=iterates|final, claim=module|total"
)


def _design_options(kind: str, items: list[str]) -> dict:
    from attacks.canary import draw_edge_canaries, draw_node_canaries
    from dpaudit.app.commands._common import parse_literal

    if kind == "gradient":
        from dpaudit.app.workflows.gradient_canary import DESIGN_KEYS

        known = set(DESIGN_KEYS)
    else:
        fn = draw_node_canaries if kind == "node" else draw_edge_canaries
        known = {p.name for p in inspect.signature(fn).parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise ConfigurationError(f"--design expects KEY=VALUE, got {item!r}")
        if key not in known:
            raise ConfigurationError(f"--design {key}: unknown for {kind} canaries; known: {', '.join(sorted(known))}")
        out[key] = parse_literal(value)
    return out


def cmd_canary(args) -> int:
    from dpaudit.app.names import check_defense_name

    check_defense_name(args.defense)  # before torch loads (a fraction of a second)
    from dpaudit.app.commands._common import check_memory, check_target_epsilon, parse_delta
    from dpaudit.app.commands._dataset_args import check_declarations, parse_dataset_options
    from dpaudit.app.outputs import check_output_file
    from dpaudit.app.workflows.canary import canary_audit, check_canary_request, summary_lines
    from dpaudit.data.datasets import load_dataset
    from dpaudit.data.splits import make_split
    from dpaudit.training.defense import parse_overrides

    for required in ("defense", "dataset", "kind", "out"):
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
    check_canary_request(args.defense, args.epsilon, args.kind, args.canaries, args.runs, overrides,
                         args.delta, args.device, args.seed, design)  # fmt: skip
    defense = cls(epsilon=args.epsilon, delta=args.delta, seed=args.seed, device=args.device, **overrides)
    check_target_epsilon(defense.epsilon)
    options = parse_dataset_options(args.dataset_option, args.dataset, declaring=False)
    check_declarations(args.dataset, options, [defense], args.delta)  # everything missing, in one line
    check_output_file(args.out, "canary", force=args.force)
    dataset = load_dataset(args.dataset, root=args.data_root, **options)
    check_memory(defense, dataset.num_nodes, dataset.num_features)
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
    )
    print("\n".join(summary_lines(result)))
    print(f"-> {args.out}")
    return 0


def add_parser(subparsers) -> None:
    from dpaudit.app.commands._dataset_args import DATASET_HELP, SPLIT_HELP, add_dataset_option_argument
    from dpaudit.seeds import seed_argument

    p = subparsers.add_parser(
        "canary",
        help="audit a defense with node, edge or DP-SGD gradient canaries inserted by fair coins (JSON ε lower bounds)",
    )
    p.add_argument("--defense")
    p.add_argument("--dataset", help=DATASET_HELP)
    add_dataset_option_argument(p)
    p.add_argument(
        "--epsilon", help="target ε of a private defense (a positive number or inf); a non-private one needs none"
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
