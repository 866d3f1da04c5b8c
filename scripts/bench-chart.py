#!/usr/bin/env python3
"""Draws docs/img/sittings.svg from docs/sittings.csv: for each benchmark sitting since the
ledger, the service's rate beside PostgreSQL's own limit measured in the same sitting (new
payments against the naive limit, replays against the lookup), with the ratio above each pair
and the targets as lines; where a sitting measured it, a dashed line marks what PostgreSQL
alone did with every write of a new payment (the ceiling no service in front of it passes).
The host's speed drifts between sittings, so the ratios are what compare.
Usage: scripts/bench-chart.py (after adding a row to docs/sittings.csv)."""
import csv
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
ROWS = list(csv.DictReader(open(ROOT / "docs" / "sittings.csv")))

W, PANEL_H, TOP, LEFT, GAP = 760, 230, 40, 60, 50
OURS, THEIRS, INK, GRID = "#2f6fb3", "#c9c9c9", "#222", "#e6e6e6"


def ceiling(r, key):
    """The sitting's value of `key`, or None where the column is empty or absent."""
    value = r.get(key) if key else None
    return float(value) if value else None


def panel(y0, title, ours_key, theirs_key, theirs_name, target, ceiling_key=None):
    highest = max(max(float(r[ours_key]), float(r[theirs_key]), ceiling(r, ceiling_key) or 0)
                  for r in ROWS) * 1.12
    tick = next(t for t in (1000, 2000, 5000, 10000, 20000, 50000) if highest / t <= 5)
    peak = tick * -(-highest // tick)
    plot_w = W - LEFT - 20
    step = plot_w / len(ROWS)
    bar = step * 0.32
    scale = lambda v: PANEL_H * v / peak
    out = [f'<text x="{LEFT}" y="{y0 - 14}" font-size="14" font-weight="bold" fill="{INK}">{title}</text>']
    for i in range(int(peak // tick) + 1):
        v = tick * i
        y = y0 + PANEL_H - scale(v)
        out.append(f'<line x1="{LEFT}" x2="{W - 20}" y1="{y:.1f}" y2="{y:.1f}" stroke="{GRID}"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" font-size="10" text-anchor="end" fill="#666">{v / 1000:.0f}k</text>')
    for i, r in enumerate(ROWS):
        ours, theirs = float(r[ours_key]), float(r[theirs_key])
        x = LEFT + i * step + step * 0.16
        for j, (v, colour) in enumerate([(ours, OURS), (theirs, THEIRS)]):
            h = scale(v)
            out.append(f'<rect x="{x + j * bar:.1f}" y="{y0 + PANEL_H - h:.1f}" width="{bar - 2:.1f}" height="{h:.1f}" fill="{colour}"><title>{v:,.0f}/s</title></rect>')
        ratio = ours / theirs
        colour = "#1a7f37" if ratio >= target else "#b42318"
        limit = ceiling(r, ceiling_key)
        top = y0 + PANEL_H - scale(max(ours, theirs, limit or 0))
        out.append(f'<text x="{x + bar:.1f}" y="{top - 5:.1f}" font-size="12" text-anchor="middle" fill="{colour}">{ratio:.2f}×</text>')
        out.append(f'<text x="{x + bar:.1f}" y="{y0 + PANEL_H + 14}" font-size="11" text-anchor="middle" fill="{INK}">{r["sitting"]}th</text>')
        if limit is not None:
            y = y0 + PANEL_H - scale(limit)
            out.append(f'<line x1="{x - 2:.1f}" x2="{x + 2 * bar:.1f}" y1="{y:.1f}" y2="{y:.1f}" stroke="{INK}" stroke-width="2" stroke-dasharray="4 2"><title>PostgreSQL alone, every write: {limit:,.0f}/s</title></line>')
    out.append(f'<rect x="{W - 250}" y="{y0 - 26}" width="10" height="10" fill="{OURS}"/>'
               f'<text x="{W - 236}" y="{y0 - 17}" font-size="11" fill="{INK}">payments-api</text>'
               f'<rect x="{W - 150}" y="{y0 - 26}" width="10" height="10" fill="{THEIRS}"/>'
               f'<text x="{W - 136}" y="{y0 - 17}" font-size="11" fill="{INK}">{theirs_name}</text>')
    if ceiling_key and any(ceiling(r, ceiling_key) for r in ROWS):
        out.append(f'<line x1="{W - 250}" x2="{W - 240}" y1="{y0 - 3}" y2="{y0 - 3}" stroke="{INK}" stroke-width="2" stroke-dasharray="4 2"/>'
                   f'<text x="{W - 236}" y="{y0 + 1}" font-size="11" fill="{INK}">PostgreSQL alone, every write</text>')
    return out


parts = panel(TOP, "New payments/s (target: 2× the naive limit)",
              "new_per_s", "naive_tps", "naive limit", 2.0, "every_write_per_s")
parts += panel(TOP + PANEL_H + GAP + 20, "Replays/s (target: 2.5× the lookup limit)",
               "replays_per_s", "lookup_tps", "lookup limit", 2.5)
height = TOP + 2 * PANEL_H + GAP + 64
svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" '
       f'viewBox="0 0 {W} {height}" font-family="sans-serif">'
       f'<rect width="{W}" height="{height}" fill="white"/>' + "".join(parts) +
       f'<text x="{LEFT}" y="{height - 8}" font-size="10" fill="#666">Each pair: one sitting of scripts/bench.sh on one 2-core '
       f'machine, 64 connections. The host drifts between sittings: compare the ratios.</text></svg>\n')
out = ROOT / "docs" / "img" / "sittings.svg"
out.write_text(svg)
print(f"wrote {out.relative_to(ROOT)} ({len(ROWS)} sittings)")
