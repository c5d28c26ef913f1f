"""One bar chart for the benchmarks that compare ferry with a reference:
a group of bars per measure (one bar per ferry configuration), a red dashed
line at each measure's goal, written to a PNG."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def plot(out, labels, series, goals, ylabel, title, log=False):
    """series: [(legend, [value per label])]; goals: [goal or None per label]."""
    fig, ax = plt.subplots(figsize=(11, 5))
    width = 0.8 / len(series)
    for i, (legend, values) in enumerate(series):
        ax.bar([j + i * width for j in range(len(labels))], values, width, label=legend)
    for j, goal in enumerate(goals):
        if goal:
            ax.plot([j - width / 2, j + width * len(series) - width / 2], [goal] * 2, "r--")
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_xticks([j + width * (len(series) - 1) / 2 for j in range(len(labels))])
    ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    if log:
        ax.set_yscale("log")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)
