"""Render a self-contained HTML privacy report (and its JSON sidecar) from cell records.

>>> write_report(records, meta, "report.html")   # doctest: +SKIP
(PosixPath('report.html'), PosixPath('report.json'))

The HTML is one file: CSS inline, figures as inline SVG, image artifacts as ``data:`` URIs, a
Content-Security-Policy that forbids fetching anything, responsive and print CSS. Jinja2
autoescapes every value; the only unescaped inserts are the SVGs made by
:mod:`reports.figures` (matplotlib escapes text) and base64 payloads validated by
:func:`data_uri`.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import os
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from jinja2 import ChainableUndefined, Environment, PackageLoader, select_autoescape

from reports import figures as figs
from reports.aggregate import build_report_data, epsilon_label, strip_artifacts

_BASE64 = re.compile(r"^[A-Za-z0-9+/]+={0,2}$")
_MAGIC = {b"\x89PNG\r\n\x1a\n": "image/png", b"\xff\xd8\xff": "image/jpeg"}


def data_uri(payload: Any) -> str | None:
    """``data:`` URI for a base64 PNG/JPEG artifact; None for anything else (never embedded)."""
    if not isinstance(payload, str):
        return None
    text = "".join(payload.split())
    if text.startswith("data:"):
        head, _, text = text.partition(",")
        if not head.endswith(";base64"):
            return None
    if not _BASE64.match(text):
        return None
    try:
        head = base64.b64decode(text[:24] + "=" * (-len(text[:24]) % 4))
    except (binascii.Error, ValueError):
        return None
    for magic, mime in _MAGIC.items():
        if head.startswith(magic):
            return f"data:{mime};base64,{text}"
    return None


CSS_PX_PER_INCH = 96
_PNG_HEAD_CHARS = 1024  # base64 characters decoded to find a PNG's size and dpi (IHDR, pHYs)


def image_size(payload: Any) -> tuple[int, int] | None:
    """The size in CSS pixels a PNG artifact is shown at: its physical size from the resolution it
    records (``pHYs``; matplotlib writes its dpi there), so an image drawn at 2 pixels per CSS
    pixel shows sharp at half its pixel size and none is stretched; its pixel size when it
    records no resolution; None for anything that is not a PNG :func:`data_uri` accepts."""
    uri = data_uri(payload)
    if uri is None or not uri.startswith("data:image/png"):
        return None
    head = uri.partition(",")[2][:_PNG_HEAD_CHARS]
    head = base64.b64decode(head[: len(head) // 4 * 4])
    width = height = None
    scale = 1.0
    position = 8  # after the signature: chunks of (length, type, data, crc)
    while position + 8 <= len(head):
        length = int.from_bytes(head[position : position + 4], "big")
        kind = head[position + 4 : position + 8]
        data = head[position + 8 : position + 8 + length]
        if kind == b"IHDR" and len(data) >= 8:
            width, height = int.from_bytes(data[:4], "big"), int.from_bytes(data[4:8], "big")
        elif kind == b"pHYs" and len(data) == 9 and data[8] == 1:  # unit 1: pixels per metre
            dpi = int.from_bytes(data[:4], "big") * 0.0254
            if dpi > 0:
                scale = CSS_PX_PER_INCH / dpi
        elif kind == b"IDAT":
            break
        position += 12 + length
    if not width or not height:
        return None
    return max(1, round(width * scale)), max(1, round(height * scale))


#: captions of the image artifacts attacks produce (by file name); others are shown by name
ARTIFACT_CAPTIONS = {
    "tsne.png": "t-SNE of training embeddings, coloured by class",
    "umap.png": "UMAP of training embeddings, coloured by class",
}


def artifact_caption(name: str) -> str:
    return ARTIFACT_CAPTIONS.get(str(name), str(name))


def _num(value, digits: int = 3) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        if isinstance(value, float) and math.isinf(value):
            return "∞"
        if isinstance(value, float) and math.isnan(value):
            return "—"
        return f"{value:.{digits}f}" if isinstance(value, float) else str(value)
    return str(value)


def _count(value) -> str:
    """A node count: a whole number as an integer; a mean over runs that is not whole keeps one
    decimal (rounding it would state a count no run had)."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    return str(int(value)) if float(value).is_integer() else f"{value:.1f}"


def _sci(value) -> str:
    if value is None:
        return "—"
    if value == 0:
        return "0"
    return f"{value:.1e}" if value < 1e-2 else f"{value:g}"


def _ci(pair) -> str:
    if not pair or pair[0] is None or pair[1] is None:
        return ""
    return f"[{pair[0]:.3f}, {pair[1]:.3f}]"


def _value(v) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, (dict, list)):
        return json.dumps(v, ensure_ascii=False, default=str)
    return "—" if v is None else str(v)


def _mech_keys(mechanisms: list[dict]) -> list[str]:
    keys: list[str] = []
    for m in mechanisms:
        for k in m:
            if k not in keys:
                keys.append(k)
    # name first, then the mechanism class, then the parameters as recorded
    order = {"name": 0, "mechanism": 1}
    return sorted(keys, key=lambda k: (order.get(k, 2), keys.index(k)))


VERDICT_WORDS = {
    "broken": "guarantee broken",
    "consistent": "consistent",
    "underpowered": "not refuted · audit too small",
    "not-auditable": "claim not tested",
    "none": "no guarantee",
}


#: the words of a hypothesis's verdict (a user's or a paper's claim is tested, never proven)
HYPOTHESIS_VERDICT_WORDS = {"broken": "claim refuted", "consistent": "consistent with the claim"}


def verdict_label(verdict: dict) -> str:
    """A verdict's short label: "consistent" always with the largest ε its audit could have
    certified, so a reader never sees it without the audit's power; "not refuted · audit too
    small" likewise."""
    word = VERDICT_WORDS.get(verdict.get("status"), str(verdict.get("status")))
    if verdict.get("hypothesis"):  # a user's or a paper's unproven claim: refuted or consistent, never "broken"
        word = HYPOTHESIS_VERDICT_WORDS.get(verdict.get("status"), word)
    power = verdict.get("power")
    if verdict.get("status") in ("consistent", "underpowered") and power:
        return f"{word} (audit could certify ε ≤ {_num(power['max_epsilon'])})"
    if verdict.get("status") == "underpowered":
        return f"{word} (its power is unknown)"
    return word


def and_list(items) -> str:
    """Names as an English list: ``a``, ``a and b``, ``a, b and c``."""
    items = [str(i) for i in items]
    if len(items) <= 2:
        return " and ".join(items)
    return f"{', '.join(items[:-1])} and {items[-1]}"


def _css_colour(rgba) -> str:
    """A matplotlib RGBA tuple as a CSS colour (grey when unknown); numbers only, never user text."""
    if not rgba:
        return "#999999"
    r, g, b = (max(0, min(255, round(float(c) * 255))) for c in rgba[:3])
    return f"#{r:02x}{g:02x}{b:02x}"


def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("reports", "templates"),
        autoescape=select_autoescape(enabled_extensions=("html", "j2", "htm"), default_for_string=True, default=True),
        undefined=ChainableUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    return env


def _broken_row(data: dict):
    broken = {(p["defense"], p["epsilon_target"]) for p in data["broken"]}
    broken_attacks = {(p["defense"], p["epsilon_target"], p["attack"]) for p in data["broken"]}

    def row_broken(row) -> bool:
        return (row["defense"], row["epsilon"]) in broken

    exceeds = {(p["defense"], p["epsilon_target"], p["attack"]) for p in data.get("exceeds_not_valid", [])}

    def lb_broken(row, attack) -> bool:
        return (row["defense"], row["epsilon"], attack) in broken_attacks

    def lb_exceeds(row, attack) -> bool:
        return (row["defense"], row["epsilon"], attack) in exceeds

    return row_broken, lb_broken, lb_exceeds


def render_html(data: dict[str, Any], sidecar_name: str | None = None) -> str:
    """The report as one HTML string, from :func:`reports.aggregate.build_report_data` output."""
    from dpaudit import __version__

    env = _environment()
    template = env.get_template("report.html.j2")
    row_broken, lb_broken, lb_exceeds = _broken_row(data)
    repro = data.get("reproducibility") or {}
    repro_items = [
        (k, repro[k])
        for k in (
            "dpaudit_version",
            "config_hash",
            "dataset_fingerprint",
            "seeds",
            "split",
            "delta",
            "device",
            "executor",
            "study_dir",
            "created",
        )
        if repro.get(k) is not None
    ]
    has_embeddings = any(cell for row in data["embeddings"]["rows"] for cell in row["cells"])
    styles = figs.family_styles(data.get("families") or {})
    return template.render(
        d=data,
        figures=figs.render_all(data),
        version=__version__,
        generated=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        multi_seed=any(len(r["seeds"]) > 1 for r in data["summary"]),
        unsound=sorted(
            {
                r["defense"]
                for r in data["summary"]
                if r["unit"] and not r["sound"] and r.get("claim_status") != "claimed"
            }
        ),
        claimed=sorted({r["defense"] for r in data["summary"] if r["unit"] and r.get("claim_status") == "claimed"}),
        paper_protocol=any(r.get("protocol") == "paper" for r in data["summary"]),
        verdict_word=VERDICT_WORDS.get,
        verdict_label=verdict_label,
        and_list=and_list,
        slug=lambda text: re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-"),
        colour=lambda defense: _css_colour((styles.get(defense) or {}).get("color")),
        palette=figs.palette_caption(data.get("families") or {}),
        has_embeddings=has_embeddings,
        repro_items=repro_items,
        sidecar_name=sidecar_name,
        num=_num,
        sci=_sci,
        count=_count,
        ci=_ci,
        eps=epsilon_label,
        value=_value,
        mech_keys=_mech_keys,
        pretty=lambda v: json.dumps(v, indent=2, ensure_ascii=False, default=str),
        data_uri=data_uri,
        image_size=image_size,
        artifact_caption=artifact_caption,
        row_broken=row_broken,
        lb_broken=lb_broken,
        lb_exceeds=lb_exceeds,
    )


def sidecar_path(html_path: str | Path) -> Path:
    html_path = Path(html_path)
    return html_path.with_suffix(".json") if html_path.suffix else html_path.with_name(html_path.name + ".json")


def write_report(records: list[dict], meta: dict[str, Any], path: str | Path) -> tuple[Path, Path]:
    """Write ``path`` (HTML) and its JSON sidecar (same name, ``.json``), each atomically."""
    from dpaudit.runtime import atomic_write_json, atomic_write_text

    path = Path(path)
    if path.suffix.lower() == ".json":
        from dpaudit.errors import ConfigurationError

        raise ConfigurationError("the report path must not end in .json (that name is used by the JSON sidecar)")
    data = build_report_data(records, meta)
    sidecar = sidecar_path(path)
    html = render_html(data, sidecar.name)
    atomic_write_text(path, html)
    atomic_write_json(sidecar, strip_artifacts(data))
    # atomic writes create private (0600) files; a report is meant to be shared: honour the umask
    umask = os.umask(0)
    os.umask(umask)
    for written in (path, sidecar):
        os.chmod(written, 0o666 & ~umask)
    return path, sidecar
