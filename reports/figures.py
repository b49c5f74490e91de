"""Matplotlib figures of the report, rendered to inline SVG.

Every figure is drawn from :func:`reports.aggregate.build_report_data` output only. SVGs are
made embeddable: no XML prolog, no metadata, no namespace URLs, element ids prefixed per
figure (several SVGs share one HTML document), text kept as text. User-given labels are
passed through :func:`_label` so that ``$`` never switches matplotlib into math mode.
"""

from __future__ import annotations

import io
import math
import re
from xml.etree import ElementTree

import matplotlib
from markupsafe import Markup

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from reports.aggregate import epsilon_label  # noqa: E402

COLORS = plt.get_cmap("tab20").colors[::2] + plt.get_cmap("tab20").colors[1::2]  # 10 strong, then 10 light
INF_FACTOR = 4.0  # ε = ∞ is drawn this factor to the right of the largest finite ε


def _label(text) -> str:
    """A user string made inert for matplotlib text (no mathtext)."""
    return str(text).replace("\\", "\\\\").replace("$", r"\$")


_ID = re.compile(r'(id="|url\(#|href="#)([^")]+)')
# Matplotlib XML-escapes every text it writes; an active element or attribute in its output
# would mean a label slipped through unescaped, so such an SVG is refused rather than embedded.
_ACTIVE_TAGS = {"script", "foreignobject", "iframe", "object", "embed"}


def _assert_inert(svg: str, prefix: str) -> None:
    for element in ElementTree.fromstring(svg).iter():
        tag = str(element.tag).rsplit("}", 1)[-1].lower()
        attributes = {k.rsplit("}", 1)[-1].lower(): v for k, v in element.attrib.items()}
        if (
            tag in _ACTIVE_TAGS
            or any(k.startswith("on") for k in attributes)
            or any("javascript:" in v.lower() for v in attributes.values())
        ):
            raise ValueError(f"figure {prefix}: SVG output contains active content; refusing to embed it")


def to_svg(fig, prefix: str) -> Markup:
    """Serialise ``fig`` to an SVG element for inline HTML (see the module docstring).

    The result is :class:`~markupsafe.Markup`: the one place where the report trusts markup it
    did not escape itself, after checking that it holds nothing active.
    """
    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "dpaudit"}):
        fig.savefig(
            buf,
            format="svg",
            bbox_inches="tight",
            metadata={"Date": None, "Creator": None, "Format": None, "Type": None},
        )
    plt.close(fig)
    svg = buf.getvalue()
    svg = svg[svg.index("<svg") :]
    svg = re.sub(r"<metadata>.*?</metadata>", "", svg, flags=re.S)
    _assert_inert(svg, prefix)  # while the namespaces are still declared, so it parses as XML
    svg = re.sub(r'\s+xmlns(:\w+)?="[^"]*"', "", svg)
    svg = _ID.sub(lambda m: f"{m.group(1)}{prefix}-{m.group(2)}", svg)
    return Markup(svg.replace("<svg ", f'<svg role="img" class="figure-svg" id="{prefix}" ', 1))


def _x_positions(epsilons: list) -> tuple[dict, float | None, list[float]]:
    """Map ε → x (log axis); ε = ∞ (None) goes to the right edge."""
    finite = [e for e in epsilons if e is not None]
    inf_x = (max(finite) * INF_FACTOR) if finite else 1.0
    pos = {e: (inf_x if e is None else float(e)) for e in epsilons}
    return pos, inf_x if None in epsilons else None, finite


def _epsilon_axis(ax, epsilons: list) -> None:
    pos, inf_x, finite = _x_positions(epsilons)
    ax.set_xscale("log")
    ticks = sorted(set(pos.values()))
    ax.set_xticks(ticks)
    ax.set_xticklabels([epsilon_label(None if (inf_x is not None and t == inf_x) else t) for t in ticks])
    ax.minorticks_off()
    if inf_x is not None and finite:
        ax.axvline(math.sqrt(max(finite) * inf_x), color="0.6", lw=0.8, ls=":")
    lo = min(ticks) / 1.6
    hi = max(ticks) * 1.6
    ax.set_xlim(lo, hi)
    ax.set_xlabel("theoretical ε (target)")


def _grid(n: int, max_cols: int = 3, size=(4.2, 3.3)):
    cols = max(1, min(max_cols, n))
    rows = max(1, math.ceil(n / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(size[0] * cols, size[1] * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n])


def auc_vs_epsilon(data: dict) -> str | None:
    """Headline figure: empirical AUC against theoretical ε, one panel per attack."""
    panels = data["headline"]
    if not panels:
        return None
    epsilons = data["epsilons"]
    pos, inf_x, finite = _x_positions(epsilons)
    fig, axes = _grid(len(panels))
    colors = {d: COLORS[i % len(COLORS)] for i, d in enumerate(data["defenses"])}
    for ax, panel in zip(axes, panels):
        _epsilon_axis(ax, epsilons)
        ceiling = panel["ceiling"]
        if ceiling:
            xs = np.asarray(ceiling["epsilon"])
            ys = np.asarray(ceiling["auc_max"])
            ax.fill_between(xs, ys, 1.02, color="0.85", hatch="//", edgecolor="0.7", lw=0, zorder=0)
            ax.plot(xs, ys, color="0.45", lw=1, zorder=1)
            ax.text(xs[0], 0.99, f"impossible under (ε, δ={ceiling['delta']:.0e})-DP", fontsize=6.5, va="top",
                    color="0.3")  # fmt: skip
        ax.axhline(0.5, color="0.3", lw=0.8, ls="--", zorder=1)
        for series in panel["series"]:
            pts = sorted(series["points"], key=lambda p: pos[p["epsilon"]])
            pts = [p for p in pts if p["auc"] is not None]
            if not pts:
                continue
            xs = [pos[p["epsilon"]] for p in pts]
            ys = [p["auc"] for p in pts]
            lo = [p["auc_ci"][0] if p["auc_ci"][0] is not None else p["auc"] for p in pts]
            hi = [p["auc_ci"][1] if p["auc_ci"][1] is not None else p["auc"] for p in pts]
            uncovered = series["covered"] is False
            label = _label(series["defense"])
            color = colors[series["defense"]]
            ax.fill_between(xs, lo, hi, color=color, alpha=0.18, lw=0, zorder=2)
            ax.plot(xs, ys, marker="o" if not uncovered else "x", ls="--" if uncovered else "-", color=color,
                    lw=1.6, ms=5, zorder=3, label=label)  # fmt: skip
        title = _label(panel["attack"])
        if not panel["covered_anywhere"]:
            title += "\n(not covered by any guarantee shown)"
        elif not panel["valid_audit"]:
            title += "\n(pairs not randomly assigned: no DP ceiling applies)"
        ax.set_title(title, fontsize=10)
        ax.set_ylim(0.35, 1.02)
        ax.set_ylabel("attack AUC")
    fig.suptitle("Empirical attack AUC against theoretical ε", fontsize=12)
    fig.tight_layout()
    _shared_legend(fig, axes, [
        Line2D([], [], color="0.3", ls="--", lw=0.8, label="chance (0.5)"),
        Patch(facecolor="0.85", edgecolor="0.7", hatch="//", label="above AUC_max(ε, δ): impossible"),
        Line2D([], [], color="0.4", ls="--", marker="x", label="dashed ×: attack not covered by that guarantee"),
    ])  # fmt: skip
    return to_svg(fig, "fig-headline")


def _shared_legend(fig, axes, extra_handles) -> None:
    """One legend under the figure: each defense once (colour), then the style keys."""
    seen: dict[str, object] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            if not label.startswith("_") and label not in seen:
                seen[label] = Line2D([], [], color=handle.get_color(), marker="o", lw=1.6, label=label)
    handles = [*seen.values(), *extra_handles]
    fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=min(4, len(handles)),
               fontsize=8, frameon=False)  # fmt: skip


def privacy_utility(data: dict) -> str | None:
    """Test accuracy against ε per defense, with intervals."""
    if not data["utility"]:
        return None
    epsilons = data["epsilons"]
    pos, _, _ = _x_positions(epsilons)
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    _epsilon_axis(ax, epsilons)
    for i, series in enumerate(data["utility"]):
        pts = sorted([p for p in series["points"] if p["accuracy"] is not None], key=lambda p: pos[p["epsilon"]])
        if not pts:
            continue
        xs = [pos[p["epsilon"]] for p in pts]
        ys = [p["accuracy"] for p in pts]
        err = np.array(
            [[y - (p["ci"][0] if p["ci"][0] is not None else y), (p["ci"][1] if p["ci"][1] is not None else y) - y]
             for y, p in zip(ys, pts)]
        ).T  # fmt: skip
        ax.errorbar(
            xs, ys, yerr=err, marker="o", capsize=3, color=COLORS[i % len(COLORS)], label=_label(series["defense"])
        )
    ax.set_ylabel("test accuracy")
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    ax.set_title("Privacy–utility", fontsize=11)
    fig.tight_layout()
    return to_svg(fig, "fig-utility")


def roc_curves(data: dict) -> str | None:
    """Log–log ROC per attack: each defense at the setting where the attack was strongest."""
    panels = [p for p in data["roc"] if p["curves"]]
    if not panels:
        return None
    most = max(len(p["curves"]) for p in panels) + 1
    fig, axes = _grid(len(panels), size=(4.2, 3.6 + 0.16 * most))
    colors = {d: COLORS[i % len(COLORS)] for i, d in enumerate(data["defenses"])}
    for ax, panel in zip(axes, panels):
        floor = 1e-4
        for c in panel["curves"]:
            fpr = np.clip(np.asarray(c["fpr"], dtype=float), floor, 1)
            tpr = np.clip(np.asarray(c["tpr"], dtype=float), floor, 1)
            label = f"{_label(c['defense'])} ε={epsilon_label(c['epsilon'])} (AUC {c['auc']:.3f})"
            ax.plot(fpr, tpr, color=colors[c["defense"]], lw=1.4, label=label, drawstyle="steps-post")
        grid = np.geomspace(floor, 1, 50)
        ax.plot(grid, grid, color="0.4", lw=0.8, ls="--", label="chance")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(floor, 1)
        ax.set_ylim(floor, 1.05)
        ax.set_xlabel("false positive rate")
        ax.set_ylabel("true positive rate")
        ax.set_title(_label(panel["attack"]), fontsize=10)
        ax.legend(fontsize=6.5, loc="upper center", bbox_to_anchor=(0.5, -0.2), frameon=False)
    fig.tight_layout()
    return to_svg(fig, "fig-roc")


def lower_bounds(data: dict) -> str | None:
    """Empirical ε lower bound against the accounted ε; points above the diagonal in red."""
    pts = [p for p in data["lower_bounds"] if p["claimed_epsilon"] is not None]
    if not pts:
        return None
    fig, ax = plt.subplots(figsize=(5.6, 4.4))
    top = max(max(p["claimed_epsilon"] for p in pts), max(p["epsilon_lower_bound"] for p in pts), 1.0) * 1.15
    ax.plot([0, top], [0, top], color="0.3", lw=1, ls="--", label="lower bound = claimed ε")
    ax.fill_between([0, top], [0, top], top, color="#fde0e0", lw=0, zorder=0, label="guarantee broken")
    markers = "osD^v<>ph*"
    for i, attack in enumerate(sorted({p["attack"] for p in pts})):
        sub = [p for p in pts if p["attack"] == attack]
        ok = [p for p in sub if not p["exceeds_claim"]]
        bad = [p for p in sub if p["broken"]]
        caveat = [p for p in sub if p["exceeds_claim"] and not p["broken"]]
        marker = markers[i % len(markers)]
        if caveat:
            ax.scatter([p["claimed_epsilon"] for p in caveat], [p["epsilon_lower_bound"] for p in caveat],
                       marker=marker, facecolor="none", edgecolor="#c77700", linewidths=1.5,
                       label=_label(attack) + " (above, but not a valid audit)")  # fmt: skip
        if ok:
            ax.scatter([p["claimed_epsilon"] for p in ok], [p["epsilon_lower_bound"] for p in ok], marker=marker,
                       facecolor="none", edgecolor="0.25", label=_label(attack))  # fmt: skip
        if bad:
            ax.scatter([p["claimed_epsilon"] for p in bad], [p["epsilon_lower_bound"] for p in bad], marker=marker,
                       color="#d00000", label=_label(attack) + " — BROKEN")  # fmt: skip
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    ax.set_xlabel("claimed (accounted) ε")
    ax.set_ylabel("empirical ε lower bound")
    ax.set_title("Empirical ε lower bounds against claimed ε", fontsize=11)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    return to_svg(fig, "fig-lower-bounds")


def render_all(data: dict) -> dict[str, str | None]:
    return {
        "headline": auc_vs_epsilon(data),
        "utility": privacy_utility(data),
        "roc": roc_curves(data),
        "lower_bounds": lower_bounds(data),
    }
