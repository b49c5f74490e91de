"""``dpaudit inspect``: validate a released model, say which files are public, print its guarantee per deployment."""

from __future__ import annotations

import json
from pathlib import Path


def cmd_inspect(args) -> int:
    """Load (validate) a released model and print its kind, guarantee, ledgers and which of its files are public.

    Args:
        args: the parsed command line (:class:`argparse.Namespace`) of ``dpaudit inspect``.

    Returns:
        The process exit status (0: success).

    Raises:
        DPAuditError: bad input, said in one line before any work (the CLI prints it and exits with 2).
    """
    from dpaudit.release import OWNER_FILES, PUBLIC_FILES
    from dpaudit.release.deployments import DEPLOYMENTS, deployment_entry
    from dpaudit.release.model import load
    from dpaudit.training.noise import seeded_flag

    # the public view unless the owner asks for its record (--record): the record answers "is this your graph?"
    model = load(args.model, record=bool(getattr(args, "record", False)))
    directory = Path(args.model)
    print(f"model: {args.model}")
    print(f"kind: {model.kind}   method: {model.method}")
    print(f"privacy: {model.privacy.summary()}")
    charged = model.charged_privacy  # the training ε composed with releases over the training graph
    if charged is not model.privacy:
        print(
            f"total over the training graph: {charged.summary()} (training ε composed with the releases charged to "
            "the training data)"
        )
    if seeded_flag(model.card):  # dpaudit.training.noise: noise replayable from the seed
        print(f"WARNING: {seeded_flag(model.card)}")
    query_ledger = getattr(model, "query_ledger", None)  # GAP: releases on query graphs
    if query_ledger is not None and query_ledger.releases:
        print(query_ledger.summary())
    if model.privacy.public_facts:
        facts = ", ".join(
            f"{k} = {v}" for k, v in model.privacy.public_facts.items() if k not in ("declared_by", "published")
        )
        print(f"public facts: {facts} (declared by {model.privacy.public_facts.get('declared_by', '?')})")
    if model.verification is not None:
        print(f"privacy check: {model.verification.summary}")
        if model.verification.checked:
            print(f"  checked: {'; '.join(model.verification.checked)}")
        for item in model.verification.not_checked:
            print(f"  not verified: {item}")
    # a hypothesis (a user's or a paper's unproven claim) is what the claim says, never "covered"
    hypothesis = model.privacy.hypothesis
    yes, no = ("within the claim", "NOT within the claim") if hypothesis else ("covered", "NOT covered")
    whose = "the claim (a hypothesis, not proven)" if hypothesis else "the guarantee"
    print(
        f"what ε {'is claimed to cover' if hypothesis else 'covers'}, per deployment (whose graph the answers are "
        "computed over):"
    )
    inference = model.card.get("inference")
    for deployment in DEPLOYMENTS:
        entry = deployment_entry(inference, deployment, model.privacy.is_private)
        print(f"  {deployment:<16} {yes if entry['covered'] else no}: {entry['note']}")
        if entry.get("covered_for"):
            print(f"  {'':<16} {yes} only for: {entry['covered_for']}")
        if entry.get("feature_change"):
            print(f"  {'':<16} a querier-chosen feature change: {entry['feature_change']}")
    print("files:")
    for name in PUBLIC_FILES:
        print(f"  {name:<24} public release: {yes if hypothesis else 'covered by the guarantee'} (ship these two)")
    for name in OWNER_FILES:
        if (directory / name).is_file():
            print(f"  {name:<24} owner's record: NOT covered by {whose} (never ship it)")
    if args.json:
        shown = {"privacy": model.privacy.to_dict(), "card": model.card}
        if charged is not model.privacy:
            shown["charged_privacy"] = charged.to_dict()
        if query_ledger is not None:
            shown["query_ledger"] = query_ledger.to_dict()
        print(json.dumps(shown, indent=2, default=str))
    else:
        print("(--json prints the whole privacy spec and public card)")
    return 0


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "inspect", help="validate a released model, say which files are public, print its guarantee"
    )
    p.add_argument("model")
    p.add_argument("--json", action="store_true", help="also print the whole privacy spec and public card as JSON")
    p.add_argument(
        "--record",
        action="store_true",
        help="read the owner's record too (provenance.json; default: the public view a third party holds)",
    )
    p.set_defaults(func=cmd_inspect)
