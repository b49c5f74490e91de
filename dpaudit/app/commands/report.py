"""``dpaudit report``: re-render a study's report from its saved results, without retraining."""

from __future__ import annotations

from pathlib import Path


def cmd_report(args) -> int:
    """Re-render a study's report from its saved results.

    Args:
        args: the parsed command line (:class:`argparse.Namespace`) of ``dpaudit report``.

    Returns:
        The process exit status (0: success).

    Raises:
        DPAuditError: bad input, said in one line before any work (the CLI prints it and exits with 2).
    """
    from dpaudit.app.outputs import check_report_paths
    from dpaudit.app.workflows.study import StudyResult

    check_report_paths(args.out or Path(args.study_dir) / "report.html", "study", force=args.force)
    result = StudyResult.load(args.study_dir)
    path = result.to_html(args.out)
    print(result.counts_line())
    print(f"report: {Path(path).resolve()}")
    return 0


def add_parser(subparsers) -> None:
    """Add the ``report`` subcommand and its options to ``subparsers``.

    Args:
        subparsers: the ``dpaudit`` parser's subparsers action (``add_subparsers()``).
    """
    p = subparsers.add_parser("report", help="re-render a study's report from its saved results")
    p.add_argument("study_dir")
    p.add_argument("--out", default=None, help="HTML report path (default STUDY_DIR/report.html)")
    p.add_argument("--force", action="store_true", help="replace --out and its sidecar whatever they hold")
    p.set_defaults(func=cmd_report)
