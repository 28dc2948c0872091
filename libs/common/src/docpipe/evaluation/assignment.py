"""The best assignment of rows to rows: the Hungarian algorithm (Kuhn-Munkres, in the
O(n^2 m) form with potentials), exact for any size.

Written here rather than taken from SciPy (``linear_sum_assignment``): forty lines against a
dependency of some 40 MB for one function, and the lists an evaluation pairs are a
document's rows (parties, line items), rarely more than a few dozen.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["best_assignment"]


def best_assignment(gain: Sequence[Sequence[float]]) -> list[tuple[int, int]]:
    """Pairs ``(row, column)`` that maximise the total ``gain[row][column]``: every row is
    paired when there are at least as many columns, every column otherwise. Sorted by row."""
    rows = len(gain)
    columns = len(gain[0]) if rows else 0
    if rows == 0 or columns == 0:
        return []
    if rows > columns:  # the algorithm below pairs every row: turn the matrix around
        flipped = [[gain[r][c] for r in range(rows)] for c in range(columns)]
        return sorted((r, c) for c, r in best_assignment(flipped))
    top = max(max(row) for row in gain)
    cost = [[top - g for g in row] for row in gain]  # minimise what each pair loses
    inf = float("inf")
    # 1-based, as in the classic formulation: column 0 is a free slot, u/v the potentials.
    u = [0.0] * (rows + 1)
    v = [0.0] * (columns + 1)
    owner = [0] * (columns + 1)  # owner[c]: the row paired with column c (0: none)
    way = [0] * (columns + 1)
    for row in range(1, rows + 1):
        owner[0] = row
        column = 0
        least = [inf] * (columns + 1)
        used = [False] * (columns + 1)
        while owner[column] != 0:
            used[column] = True
            current, delta, nearest = owner[column], inf, 0
            for c in range(1, columns + 1):
                if not used[c]:
                    reduced = cost[current - 1][c - 1] - u[current] - v[c]
                    if reduced < least[c]:
                        least[c], way[c] = reduced, column
                    if least[c] < delta:
                        delta, nearest = least[c], c
            for c in range(columns + 1):
                if used[c]:
                    u[owner[c]] += delta
                    v[c] -= delta
                else:
                    least[c] -= delta
            column = nearest
        while column:  # flip the augmenting path
            previous = way[column]
            owner[column] = owner[previous]
            column = previous
    return sorted((owner[c] - 1, c - 1) for c in range(1, columns + 1) if owner[c])
