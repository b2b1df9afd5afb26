"""LoRanPAC (Peng, Elenter, Agterberg, Ribeiro & Vidal, ICLR 2025): minimum-norm least squares on
ReLU random features, the feature matrix kept as a continually truncated SVD."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from tosca_foundation.errors import UserError
from tosca_foundation.limits import require_memory
from tosca_heads.method import linalg
from tosca_heads.method.baseline_estimators import Array, as_labels, as_tensor
from tosca_heads.method.baseline_registry import Interval, Param
from tosca_heads.method.ties import top_class

CHUNK_ROWS = (
    11_000  # the authors fold pending rows into the SVD once more than 10,000 (1,000-row batches) wait
)


def kept_rank(rows: int, embedding_dim: int, rank: int, truncate_percent: float) -> int:
    """The authors' truncation rule: keep round(n (1 - p/100)) of the SVD factors of the n rows
    seen so far, at most min(rank, round(E (1 - p/100))) (Python's round, as theirs)."""
    share = 1 - truncate_percent / 100
    return min(round(rows * share), rank, round(embedding_dim * share))


class LoRanPAC:
    """Random ReLU features with a continually truncated SVD and the minimum-norm least-squares classifier on it.

    H = ReLU(X W) with W a d x E standard Gaussian matrix (no scaling, as the authors'), Y the
    one-hot targets. LoRanPAC keeps the thin SVD H_{1:t}^T ~ U S V^T of every row seen, truncated
    after each update to its top round(n_t (1 - p/100)) factors (at most min(rank, round(E (1 -
    p/100)))), and Q = H_{1:t}^T Y (exact, untruncated). Its classifier is the minimum-norm
    least-squares solution on the truncated features, W_out = U diag(1/(s^2 + ridge)) U^T Q (ridge
    0: U S^-1 V^T Y = pinv(H_r) Y, H_r = V S U^T the rank-truncated feature matrix).
    An update with new rows B (b x E): P = U^T B^T, Q_B R_B = qr(B^T - U P), the SVD of the small
    [[diag(s), P], [0, R_B]], its top factors kept, U <- [U, Q_B] U'.

    Paper: Liangzu Peng, Juan Elenter, Joshua Agterberg, Alejandro Ribeiro, Rene Vidal, "LoRanPAC:
    Low-rank Random Features and Pre-trained Models for Bridging Theory and Practice in Continual
    Learning", ICLR 2025, arXiv:2410.00645. Authors' code followed: github.com/liangzu/loranpac
    (commit 32782f9), utils/inc_net.py (TSVDNet: learn_batch, update_svd, forward), models/tsvd.py,
    exps/tsvd/*.json (rank 10,000, 20,000 for ObjectNet and OmniBenchmark; truncate_percent 25;
    ridge 0; E 100,000; use_RE, use_relu; coslinear false).

    Deviations, named: E defaults to 10,000 (RanPAC's M here), not the authors' 100,000, so that it
    runs within RanPAC's time (--loranpac-embedding-dim 100000 gives theirs where it fits); float64
    statistics (theirs float32 on a GPU), so the re-orthonormalising QR of U after each update (a
    float32 safeguard that changes U by column signs and rounding only) is left out; singular
    values below the pseudo-inverse's cut-off (max(s) max(E, n) eps) are dropped, where theirs
    would divide by zero; rows are folded in the given order in chunks of 11,000 (theirs: shuffled
    1,000-row batches, folded once more than 10,000 wait). The random matrix is drawn on the CPU
    from `seed` alone (theirs from the global seed 1993 after the backbone's draws).

    State (never samples): U, E x r float64, s (r), Q = H^T Y, E x C float64, and the d x E float32
    random matrix (drawn again from its seed): 8 (E r + r + E C) bytes of statistics, r at most
    min(rank, 0.75 E, 0.75 n)."""

    paper = (  # the paper it follows, as `tosca list` and docs/baselines.md cite it
        "Peng, Elenter, Agterberg, Ribeiro & Vidal, LoRanPAC: Low-rank Random Features and "
        "Pre-trained Models for Bridging Theory and Practice in Continual Learning, ICLR 2025, "
        "arXiv:2410.00645"
    )
    incremental = True
    deterministic = False
    runs_by_default = False
    order_free = False  # continual truncation: the kept factors depend on the order of the rows
    # a class's rows may come in several calls: Q sums over rows and the SVD folds rows as they come
    # (as a class met in one call would be folded; exactly so with truncate_percent 0)
    recurring_classes = True
    label = "LoRanPAC"
    params = (
        Param(
            "embedding_dim",
            int,
            "LoRanPAC's random-feature dimension E (the authors' 100,000; here 10,000, RanPAC's M).",
            valid=Interval(1, None),
            said="E = {:,}",
        ),
        Param(
            "rank",
            int,
            "Most SVD factors LoRanPAC keeps (the authors' 10,000; 20,000 for ObjectNet, OmniBenchmark).",
            valid=Interval(1, None),
            said="rank <= {:,}",
        ),
        Param(
            "truncate_percent",
            float,
            "Percent of the SVD factors LoRanPAC truncates after each update (the authors' 25).",
            valid=Interval(0, 100, closed="left"),
            said="{:g}% truncated",
        ),
        Param(
            "ridge",
            float,
            "Ridge added to the squared singular values (the authors' 0: minimum-norm least squares).",
            valid=Interval(0, None),
        ),
        Param(
            "seed",
            int,
            "Seed of LoRanPAC's random matrix.",
            valid=Interval(0, 2**32, closed="left"),
            seed=True,
        ),
    )

    @staticmethod
    def check_fits(
        dim: int,
        classes: int = 0,
        embedding_dim: int = 10_000,
        rank: int = 10_000,
        truncate_percent: float = 25.0,
        **_: object,
    ) -> None:
        """U (E x r, r at most min(rank, round(E (1 - p/100)))) with its update's [U, Q_B] and new
        U (three E x r float64 matrices, as RanPAC counts three M x M), Q (E x C) and the d x E
        float32 random matrix must fit. As RanPAC's projections, a task's (chunk's) n rows add about
        3 x 8 n E bytes while it is folded in, not counted here (n is not known before the run)."""
        e = embedding_dim
        r = kept_rank(10**18, e, rank, truncate_percent)
        need = 3 * 8 * e * r + 8 * e * max(classes, 1) + 4 * dim * e
        require_memory(
            f"LoRanPAC with E = {e:,} and rank {r:,}",
            need,
            "lower --loranpac-embedding-dim or --loranpac-rank",
        )

    @staticmethod
    def work(
        shape: object,
        embedding_dim: int = 10_000,
        rank: int = 10_000,
        truncate_percent: float = 25.0,
        **_: object,
    ) -> tuple[float, str]:
        """Its arithmetic on a stream of `shape`: projections, H^T Y, and per chunk of rows the
        SVD update (P and the residual, the residual's QR, the small SVD, the new U), the weights,
        and every seen test row scored."""
        train, test, dim = shape.train, shape.test, shape.dim  # type: ignore[attr-defined]
        e, per_class = embedding_dim, shape.classes / max(len(train), 1)  # type: ignore[attr-defined]
        flops, seen, r = 0.0, 0, 0
        for t, rows in enumerate(train):
            classes = per_class * (t + 1)
            flops += 2 * rows * dim * e + 2 * rows * e * classes  # projection, H^T Y
            for start in range(0, rows, CHUNK_ROWS):
                b = min(CHUNK_ROWS, rows - start)
                seen += b
                keep = kept_rank(seen, e, rank, truncate_percent)
                flops += 4 * e * r * b + 4 * e * b * b + 22 * (r + b) ** 3 + 2 * e * (r + b) * keep
                r = keep
            seen_test = sum(test[: t + 1])
            flops += 4 * e * r * classes + 2 * seen_test * dim * e + 2 * seen_test * e * classes
        return flops, "float64"

    def __init__(
        self,
        embedding_dim: int = 10_000,
        rank: int = 10_000,
        truncate_percent: float = 25.0,
        ridge: float = 0.0,
        seed: int = 0,
        chunk_rows: int = CHUNK_ROWS,
        device: str | torch.device = "cpu",
    ):
        self.embedding_dim = embedding_dim
        self.rank = rank
        self.truncate_percent = truncate_percent
        self.ridge = ridge
        self.seed = seed
        self.chunk_rows = chunk_rows
        self.device = device

    # ----------------------------------------------------------------------------- random features

    def _projected(self, features: Array, run: linalg.Run) -> list[torch.Tensor]:
        """ReLU(x W) in float64, as row blocks (linalg.ROWS rows), each product of a (block, column
        tile) on `run`'s threads: the same bits on any thread count."""
        x = as_tensor(features, self.device)
        blocks, tiles = linalg.row_blocks(x), linalg.column_tiles(self.projection_)
        pairs = [(b, t) for b in range(len(blocks)) for t in range(len(tiles))]
        flat = run(lambda pair: torch.relu(blocks[pair[0]] @ tiles[pair[1]]).double(), pairs)
        return [torch.cat(flat[b * len(tiles) : (b + 1) * len(tiles)], 1) for b in range(len(blocks))]

    @staticmethod
    def _left_product(left: torch.Tensor, right: torch.Tensor, run: linalg.Run) -> torch.Tensor:
        """left^T right (both E rows): partial products over fixed row spans of E, on `run`'s
        threads, summed in their order."""
        spans = linalg.spans(len(left), linalg.ROWS)
        parts = run(lambda s: linalg.own_tile(left[s]).T @ linalg.own_tile(right[s]), spans)
        total = parts[0]
        for part in parts[1:]:
            total = total + part
        return total

    @staticmethod
    def _rows_product(left: torch.Tensor, right: torch.Tensor, run: linalg.Run) -> torch.Tensor:
        """left right, each fixed row block of `left` on its own worker (no sum is split)."""
        return torch.cat(run(lambda block: block @ right, linalg.row_blocks(left, linalg.ROWS)))

    # ------------------------------------------------------------------------------------ learning

    def partial_fit(self, features: Array, labels: Array) -> LoRanPAC:
        labels = as_labels(labels)
        if not hasattr(self, "projection_"):
            gen = torch.Generator().manual_seed(self.seed)  # drawn on the CPU: the same matrix anywhere
            projection = torch.randn(features.shape[1], self.embedding_dim, generator=gen)
            self.projection_ = projection.to(self.device)
            e, device = self.embedding_dim, self.projection_.device
            self.basis_ = torch.zeros(e, 0, dtype=torch.float64, device=device)
            self.singular_ = torch.zeros(0, dtype=torch.float64, device=device)
            self.cross_ = torch.zeros(e, 0, dtype=torch.float64, device=device)
            self.rows_seen_ = 0
        device = self.projection_.device
        with linalg.workers(device=device) as run:
            blocks = self._projected(features, run)
            h = torch.cat(blocks) if blocks else torch.zeros(0, self.embedding_dim, dtype=torch.float64)
            del blocks  # h holds them
            n_classes = max(self.cross_.shape[1], int(labels.max()) + 1)
            y = F.one_hot(torch.from_numpy(labels).long(), n_classes).double().to(device)
            self.cross_ = F.pad(self.cross_, (0, n_classes - self.cross_.shape[1]))
            self.cross_ += self._left_product(h, y, run)
            for start in range(0, len(h), self.chunk_rows):
                self._fold(h[start : start + self.chunk_rows], run)
            self.weights_ = self._weights(run)
        return self

    def _fold(self, chunk: torch.Tensor, run: linalg.Run) -> None:
        """One update of the truncated SVD of H^T with `chunk`'s rows (the authors' update_svd)."""
        self.rows_seen_ += len(chunk)
        keep = kept_rank(self.rows_seen_, self.embedding_dim, self.rank, self.truncate_percent)
        basis, singular = self.basis_, self.singular_
        if basis.shape[1] == 0:
            with linalg.single_threaded(chunk.device):
                _, singular, vh = torch.linalg.svd(chunk, full_matrices=False)  # chunk^T = vh^T s u^T
            basis = vh.T
        else:
            upper = self._left_product(basis, chunk.T.contiguous(), run)  # U^T B^T, r x b
            residual = chunk.T - self._rows_product(basis, upper, run)
            with linalg.single_threaded(chunk.device):
                q, r = torch.linalg.qr(residual)
                middle = torch.cat(
                    [
                        torch.cat([torch.diag(singular), upper], 1),
                        torch.cat([torch.zeros(len(r), len(singular), dtype=r.dtype, device=r.device), r], 1),
                    ]
                )
                rotation, singular, _ = torch.linalg.svd(middle, full_matrices=False)
            keep = min(keep, len(singular))
            basis = self._rows_product(torch.cat([basis, q], 1), rotation[:, :keep].contiguous(), run)
        # the pseudo-inverse's cut-off (numpy's pinv/matrix_rank rule): a zero singular value would divide by 0
        cutoff = (
            float(singular[0]) * max(self.embedding_dim, self.rows_seen_) * torch.finfo(singular.dtype).eps
        )
        keep = min(keep, int((singular[:keep] > cutoff).sum()))
        self.basis_, self.singular_ = basis[:, :keep].contiguous(), singular[:keep].contiguous()

    def _weights(self, run: linalg.Run) -> torch.Tensor:
        """U diag(1 / (s^2 + ridge)) U^T Q: E x C."""
        projected = self._left_product(self.basis_, self.cross_, run)  # r x C
        scaled = projected / (self.singular_**2 + self.ridge)[:, None]
        return self._rows_product(self.basis_, scaled, run)

    # ---------------------------------------------------------------------------------- prediction

    def decision_function(self, features: Array) -> np.ndarray:
        """Scores [n, classes]: each row block's random features times the weights."""
        if not hasattr(self, "weights_"):
            raise UserError("LoRanPAC has not been fitted: call partial_fit first")
        with linalg.workers(device=self.projection_.device) as run:
            scores = [(block @ self.weights_).cpu().numpy() for block in self._projected(features, run)]
        return np.concatenate(scores) if scores else np.zeros((0, self.weights_.shape[1]))

    def predict(self, features: Array) -> np.ndarray:
        return top_class(self.decision_function(features))  # a tie counts as wrong

    @staticmethod
    def parameters_for(features: int, classes: int, /, embedding_dim: int = 10_000, **_: object) -> int:
        """The d x E projection and the E x C weights (`num_parameters()`'s count, from what was
        asked)."""
        return features * embedding_dim + embedding_dim * classes

    def num_parameters(self) -> int:
        return int(self.projection_.numel() + self.weights_.numel())

    def state_bytes(self) -> int:
        """The statistics kept: U, s and Q = H^T Y in float64 (the random matrix is its seed's)."""
        return int(8 * (self.basis_.numel() + self.singular_.numel() + self.cross_.numel()))
