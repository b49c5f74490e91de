"""Standard architectures shared by baselines, defenses and attack surrogates.

Every module maps ``(x, edge_index)`` to logits and exposes ``embed(x, edge_index)``, the
penultimate representation the embedding probes look at. Architectures are built from a
JSON-able config by :func:`build_architecture` so that a released model can be rebuilt from
its ``model.json`` without running any code stored with it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import GATConv, GCNConv, SAGEConv

from dpaudit.data.adjacency import Adjacency, as_adjacency
from dpaudit.errors import ModelFormatError

_ACTIVATIONS = {"relu": nn.ReLU, "selu": nn.SELU, "tanh": nn.Tanh, "elu": nn.ELU}
#: the activation names :func:`activation` knows (hyperparameters declare them as their options)
ACTIVATIONS = tuple(_ACTIVATIONS)


# --------------------------------------------------------------------------------- sparse input
SPARSE_DENSITY = 0.1
"""Feature matrices with at most this fraction of non-zeros are kept sparse (:func:`features`)."""


class SparseFeatures:
    r"""A sparse feature matrix :math:`X \in \mathbb R^{n \times F}` kept for first layers.

    Holds X in CSR and, built on first use, :math:`X^\top` in CSR (same values, permuted by
    ``perm``), so that the forward :math:`XW^\top` and the weight gradient
    :math:`G^\top X = (X^\top G)^\top` are both sparse × dense products over the stored values
    only (:meth:`matmul`, :meth:`t_matmul`; nothing of size n × F is ever materialised). Dropout acts on the stored values only — the same random function as
    dense dropout restricted to the non-zeros (dropping a zero changes nothing) — and reuses
    the transpose pattern (``values[perm]``), so it costs O(nnz).

    Shapes: ``shape == (n, F)``; ``row`` [nnz] (row of every stored value, CSR order);
    ``values`` [nnz]; ``perm`` [nnz] with ``xt.values() == values[perm]``.

    Args:
        crow: CSR row pointers.
        col: column of every stored value.
        values: the stored values.
        row: row of every stored value.
        shape: ``(n, F)``.
        transpose: ``(t_crow, t_col, perm)`` of X^T when already built, else ``None``.
    """

    def __init__(self, crow, col, values, row, shape, transpose=None):
        self.crow, self.col, self.values, self.row = crow, col, values, row
        self.shape = torch.Size(shape)
        # (t_crow, t_col, perm) of X^T: a sort, built on first use (a forward-only or
        # Gram-only use of a row subset never needs it)
        self._transpose: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = transpose
        self._t_values: torch.Tensor | None = None  # X^T's values, built on first use (values never change in place)

    @property
    def transpose_pattern(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(t_crow, t_col, perm)``: X^T's CSR pattern and ``perm`` with X^T's values = ``values[perm]``."""
        if self._transpose is None:
            perm = torch.sort(self.col, stable=True).indices  # stable: rows stay ascending in a column
            t_crow = torch.zeros(self.shape[1] + 1, dtype=torch.long, device=self.values.device)
            t_crow[1:] = torch.bincount(self.col, minlength=self.shape[1]).cumsum(0)
            self._transpose = (t_crow, self.row[perm], perm)
        return self._transpose

    @property
    def perm(self) -> torch.Tensor:
        return self.transpose_pattern[2]

    # -- construction -----------------------------------------------------------------------
    @classmethod
    def from_tensor(cls, x: torch.Tensor) -> SparseFeatures:
        """From a dense, COO or CSR ``[n, F]`` tensor (values keep their dtype and device).

        Args:
            x: the matrix.

        Returns:
            The sparse features.

        Raises:
            ValueError: ``x`` is not two-dimensional.

        Shapes:
            x: [n, F]
        """
        if x.dim() != 2:
            raise ValueError(f"features must be a matrix, got shape {tuple(x.shape)}")
        coo = (x if x.layout == torch.sparse_coo else x.to_sparse()).coalesce()
        rows, cols = coo.indices()
        values = coo.values()
        n, f = coo.shape
        return cls._from_coo(rows, cols, values, (n, f))

    @classmethod
    def _from_coo(cls, rows, cols, values, shape) -> SparseFeatures:
        """``rows``/``cols`` sorted by (row, col) (a coalesced COO)."""
        n, _ = shape
        crow = torch.zeros(n + 1, dtype=torch.long, device=values.device)
        crow[1:] = torch.bincount(rows, minlength=n).cumsum(0)
        return cls(crow, cols, values, rows, shape)

    # -- tensor-like helpers ----------------------------------------------------------------
    def size(self, dim: int | None = None):
        """The shape, or one of its sizes (as ``Tensor.size``).

        Args:
            dim: the dimension, or ``None`` for the whole shape.

        Returns:
            ``torch.Size`` or an int.
        """
        return self.shape if dim is None else self.shape[dim]

    def dim(self) -> int:
        """Always 2 (a matrix)."""
        return 2

    def __len__(self) -> int:
        return self.shape[0]

    @property
    def device(self) -> torch.device:
        return self.values.device

    @property
    def dtype(self) -> torch.dtype:
        return self.values.dtype

    @property
    def nnz(self) -> int:
        return int(self.values.numel())

    @property
    def is_sparse(self) -> bool:
        return True

    def _with_values(self, values: torch.Tensor) -> SparseFeatures:
        # The pattern is built here (once, cached on self) so that every re-valued copy (dropout
        # each epoch) shares it instead of sorting again.
        return SparseFeatures(self.crow, self.col, values, self.row, self.shape, self.transpose_pattern)

    def to(self, device=None, dtype=None) -> SparseFeatures:
        """A copy on ``device`` with values of ``dtype`` (the transpose pattern is kept if built).

        Args:
            device: target device, or ``None`` to keep it.
            dtype: dtype of the values, or ``None`` to keep it.

        Returns:
            The copy.
        """
        crow, col, row = (t.to(device) for t in (self.crow, self.col, self.row))
        transpose = None if self._transpose is None else tuple(t.to(device) for t in self._transpose)
        return SparseFeatures(crow, col, self.values.to(device=device, dtype=dtype), row, self.shape, transpose)

    def float(self) -> SparseFeatures:
        """A copy with float32 values."""
        return self.to(dtype=torch.float32)

    def to_dense(self) -> torch.Tensor:
        """The dense matrix [n, F] (materialises n × F values)."""
        out = self.values.new_zeros(self.shape)
        out[self.row, self.col] = self.values
        return out

    def t_values(self) -> torch.Tensor:
        """X^T's stored values in its CSR order (``values[perm]``), cached."""
        if self._t_values is None:
            self._t_values = self.values[self.perm]
        return self._t_values

    def rows(self, index: torch.Tensor) -> SparseFeatures:
        """The sub-matrix of rows ``index`` (in that order; a row may repeat). O(nnz of the rows).

        Args:
            index: row ids.

        Returns:
            The rows as :class:`SparseFeatures`.

        Shapes:
            index: [k]
        """
        index = index.to(self.device)
        counts = (self.crow[1:] - self.crow[:-1])[index]
        new_rows = torch.repeat_interleave(torch.arange(len(index), device=self.device), counts)
        starts = torch.repeat_interleave(self.crow[index], counts)
        offsets = torch.arange(int(counts.sum()), device=self.device) - torch.repeat_interleave(
            counts.cumsum(0) - counts, counts
        )
        take = starts + offsets
        return SparseFeatures._from_coo(new_rows, self.col[take], self.values[take], (len(index), self.shape[1]))

    def __getitem__(self, index) -> SparseFeatures:
        if isinstance(index, torch.Tensor) and index.dtype == torch.bool:
            index = index.nonzero().view(-1)
        if not isinstance(index, torch.Tensor):
            raise TypeError("SparseFeatures supports row indexing by an index or mask tensor only")
        return self.rows(index)

    # -- operations -------------------------------------------------------------------------
    def dropout(self, p: float, training: bool = True) -> SparseFeatures:
        """Inverted dropout on the stored values (see the class docstring).

        Args:
            p: drop probability.
            training: apply dropout (else return ``self``).

        Returns:
            The features with dropped stored values.
        """
        if not training or p == 0:
            return self
        return self._with_values(F.dropout(self.values, p, True))

    def row_normalize(self) -> SparseFeatures:
        r""":math:`x_v / \lVert x_v\rVert_1` per row; all-zero rows stay zero."""
        total = torch.zeros(self.shape[0], dtype=self.dtype, device=self.device).index_add_(
            0, self.row, self.values.abs()
        )
        return self._with_values(self.values / total.clamp(min=torch.finfo(self.dtype).tiny)[self.row])

    def row_sq_norms(self) -> torch.Tensor:
        r""":math:`\lVert x_v\rVert_2^2` for every row, [n]."""
        out = torch.zeros(self.shape[0], dtype=self.dtype, device=self.device)
        return out.index_add_(0, self.row, self.values.pow(2))

    def matmul(self, m: torch.Tensor) -> torch.Tensor:
        r""":math:`XM` for dense M [F, k] → [n, k] (no autograd): row v is
        :math:`\sum_{f} x_{vf} m_f` over v's stored values, in CSR order.

        Computed as a weighted sum-``embedding_bag`` (bag v = v's stored columns, weights its
        values): the same sums as a CSR × dense product, 3–4× faster on CPU (cora_ml, one thread)
        and available on CUDA.

        Args:
            m: the dense matrix.

        Returns:
            XM.

        Shapes:
            m: [F, k]
            return: [n, k]
        """
        return _bag_sum(self.col, self.crow, self.values, m)

    def t_matmul(self, g: torch.Tensor) -> torch.Tensor:
        r""":math:`X^\top G` for dense G [n, k] → [F, k] (no autograd); :meth:`matmul` over
        :math:`X^\top`'s pattern (bag f = the rows storing column f).

        Args:
            g: the dense matrix.

        Returns:
            X^T G.

        Shapes:
            g: [n, k]
            return: [F, k]
        """
        t_crow, t_col, _ = self.transpose_pattern
        return _bag_sum(t_col, t_crow, self.t_values(), g)

    def linear(self, weight: torch.Tensor) -> torch.Tensor:
        r""":math:`X W^\top`, differentiable in ``weight`` [out, F] → [n, out].

        Args:
            weight: the weight.

        Returns:
            X W^T.

        Shapes:
            weight: [out, F]
            return: [n, out]
        """
        return _SparseLinearFunction.apply(weight, self)


def row_dots(x, first: torch.Tensor, second: torch.Tensor, chunk: int = 1 << 14) -> torch.Tensor:
    r""":math:`x_u\cdot x_v` for every (u, v) in zip(first, second), [P].

    Dense x: chunked row products. :class:`SparseFeatures`: the stored values of
    the u rows are matched with those of the v rows by the key (pair, column) — one sort and a
    binary search, O(ν log ν) for ν stored values, nothing of size P × F.

    Args:
        x: node features, dense or :class:`SparseFeatures`.
        first: first node of every pair.
        second: second node of every pair.
        chunk: pairs per chunk (dense ``x``).

    Returns:
        The dot products.

    Shapes:
        first: [P]
        second: [P]
        return: [P]
    """
    if not isinstance(x, SparseFeatures):
        first, second = first.to(x.device), second.to(x.device)
        if first.numel() == 0:
            return x.new_zeros(0)
        return torch.cat([(x[u] * x[v]).sum(1) for u, v in zip(first.split(chunk), second.split(chunk))])
    num_features = x.size(1)
    a, b = x.rows(first), x.rows(second)  # row r of a / b belongs to pair r
    key_a, key_b = a.row * num_features + a.col, b.row * num_features + b.col  # both sorted (CSR order)
    out = torch.zeros(first.numel(), dtype=x.dtype, device=x.device)
    if key_a.numel() == 0 or key_b.numel() == 0:
        return out
    at = torch.searchsorted(key_b, key_a).clamp(max=key_b.numel() - 1)
    match = key_b[at] == key_a
    return out.index_add_(0, a.row[match], a.values[match] * b.values[at[match]])


def _bag_sum(index: torch.Tensor, ptr: torch.Tensor, weights: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    r"""Row r of the result is :math:`\sum_{k=ptr_r}^{ptr_{r+1}-1} w_k\,\mathrm{table}[index_k]`
    (a CSR × dense product with pattern ``(ptr, index)`` and values ``weights``), [len(ptr)-1, k]."""
    table = table.contiguous()
    rows = ptr.numel() - 1
    if index.numel() == 0 or rows == 0:
        return table.new_zeros(rows, table.size(1))
    return F.embedding_bag(index, table, ptr[:-1], mode="sum", per_sample_weights=weights.to(table.dtype))


class _SparseLinearFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, weight: torch.Tensor, x: SparseFeatures) -> torch.Tensor:
        ctx.x = x
        return x.matmul(weight.t())

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return ctx.x.t_matmul(grad.contiguous()).t(), None


def features(x: torch.Tensor, density: float | None = None) -> torch.Tensor | SparseFeatures:
    """``x`` as :class:`SparseFeatures` when at most ``density`` (default :data:`SPARSE_DENSITY`)
    of it is non-zero (cora_ml's bag-of-words: 1.75 %), else unchanged. Shapes: ``[n, F]`` → ``[n, F]``.

    Args:
        x: node features.
        density: largest fraction of non-zeros kept sparse, or ``None`` for :data:`SPARSE_DENSITY`.

    Returns:
        ``x`` or its :class:`SparseFeatures`.
    """
    density = SPARSE_DENSITY if density is None else density
    if isinstance(x, SparseFeatures):
        return x
    if x.layout != torch.strided:
        return SparseFeatures.from_tensor(x)
    if x.dim() != 2 or x.numel() == 0 or not x.is_floating_point():
        return x
    if float((x != 0).sum()) <= density * x.numel():
        return SparseFeatures.from_tensor(x)
    return x


def feature_dropout(x, p: float, training: bool):
    """Dropout on dense or :class:`SparseFeatures` input (sparse: on the non-zeros only).

    Args:
        x: node features, dense or :class:`SparseFeatures`.
        p: drop probability.
        training: apply dropout.

    Returns:
        The features after dropout, same kind as ``x``.
    """
    if isinstance(x, SparseFeatures):
        return x.dropout(p, training)
    return F.dropout(x, p, training)


class InputLinear(nn.Linear):
    r"""``nn.Linear`` (same parameters and state-dict keys) that also accepts
    :class:`SparseFeatures`: then :math:`y = XW^\top + b` is a CSR × dense product, forward and
    backward. Dense input takes the ordinary path. Shapes: ``[n, in] → [n, out]``.

    Args:
        in_features: input width F (``nn.Linear``'s constructor).
        out_features: output width.
        bias: whether the layer has a bias.
        device: device of the parameters.
        dtype: dtype of the parameters.
    """

    def forward(self, x):
        """Args:
            x: node features, dense or :class:`SparseFeatures`.

        Returns:
            ``xW^T + b``.

        Shapes:
            x: [n, in]
            return: [n, out]
        """
        if isinstance(x, SparseFeatures):
            out = x.linear(self.weight)
            return out if self.bias is None else out + self.bias
        return super().forward(x)


def activation(name: str) -> nn.Module:
    """A new activation module by name (one of :data:`ACTIVATIONS`).

    Args:
        name: the activation's name.

    Returns:
        The module.

    Raises:
        ModelFormatError: an unknown name.
    """
    try:
        return _ACTIVATIONS[name]()
    except KeyError:
        raise ModelFormatError(f"unknown activation {name!r}") from None


class MLP(nn.Module):
    """Multi-layer perceptron; ignores the graph. ``hidden`` lists the hidden widths.

    Args:
        in_dim: number of input features.
        hidden: widths of the hidden layers.
        out_dim: number of classes.
        dropout: dropout probability before every layer.
        act: activation name.
    """

    #: a node's output reads its own features only
    propagation_hops = 0

    def __init__(self, in_dim: int, hidden: list[int], out_dim: int, dropout: float = 0.0, act: str = "relu"):
        super().__init__()
        dims = [in_dim, *hidden]
        self.hidden_layers = nn.ModuleList(InputLinear(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.out = InputLinear(dims[-1], out_dim)
        self.dropout = nn.Dropout(dropout)
        self.act = activation(act)

    def embed(self, x, edge_index: torch.Tensor | None = None) -> torch.Tensor:
        """``x`` dense ``[n, F]`` or :class:`SparseFeatures` (first layer sparse × dense).

        Args:
            x: node features, dense or :class:`SparseFeatures`.
            edge_index: ignored.

        Returns:
            The last hidden layer's output.

        Shapes:
            x: [n, F]
            return: [n, hidden[-1]]
        """
        for layer in self.hidden_layers:
            x = self.act(layer(feature_dropout(x, self.dropout.p, self.training)))
        return x

    def forward(self, x, edge_index: torch.Tensor | None = None) -> torch.Tensor:
        """Logits of every row (the graph is ignored).

        Args:
            x: node features, dense or :class:`SparseFeatures`.
            edge_index: ignored.

        Returns:
            Logits.

        Shapes:
            x: [n, F]
            return: [n, out_dim]
        """
        return self.out(feature_dropout(self.embed(x), self.dropout.p, self.training))


class GNN(nn.Module):
    """Stack of message-passing layers (GCN or GraphSAGE-mean); the last one outputs logits.

    The layers are PyG's ``GCNConv`` / ``SAGEConv`` (their parameters and state-dict keys), run
    by :func:`_conv` as sparse × dense products over a :class:`~dpaudit.data.adjacency.Adjacency`
    (built once per graph); ``graph`` is an ``edge_index`` [2, E] or that adjacency.

    Args:
        conv: ``"gcn"`` or ``"sage"``.
        in_dim: number of input features.
        hidden: widths of the hidden layers.
        out_dim: number of classes.
        dropout: dropout probability before every layer.
        act: activation name.
    """

    def __init__(
        self, conv: str, in_dim: int, hidden: list[int], out_dim: int, dropout: float = 0.5, act: str = "relu"
    ):
        super().__init__()
        if conv not in GNN_CONVS:
            raise ModelFormatError(f"unknown message-passing layer {conv!r}; known: {', '.join(GNN_CONVS)}")
        layer = STACK_LAYERS[conv][0]  # GCNConv caches nothing by default
        dims = [in_dim, *hidden]
        self.hidden_layers = nn.ModuleList(layer(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.out = layer(dims[-1], out_dim)
        self.dropout = nn.Dropout(dropout)
        self.act = activation(act)

    @property
    def propagation_hops(self) -> int:
        """How far a node's output reads: one hop per layer."""
        return len(self.hidden_layers) + 1

    def embed(self, x, graph: torch.Tensor | Adjacency) -> torch.Tensor:
        """``x`` dense ``[n, F]`` or :class:`SparseFeatures` → ``[n, hidden]``.

        Args:
            x: node features, dense or :class:`SparseFeatures`.
            graph: ``edge_index`` [2, E] or an :class:`~dpaudit.data.adjacency.Adjacency`.

        Returns:
            The last hidden layer's output (``x`` itself without hidden layers).

        Shapes:
            x: [n, F]
            return: [n, hidden[-1]]
        """
        adjacency = as_adjacency(graph, x.size(0)) if self.hidden_layers else None
        for conv in self.hidden_layers:
            x = self.act(_conv(conv, feature_dropout(x, self.dropout.p, self.training), adjacency))
        return x

    def forward(self, x, graph: torch.Tensor | Adjacency) -> torch.Tensor:
        """Logits of every node.

        Args:
            x: node features, dense or :class:`SparseFeatures`.
            graph: ``edge_index`` [2, E] or an :class:`~dpaudit.data.adjacency.Adjacency`.

        Returns:
            Logits.

        Shapes:
            x: [n, F]
            return: [n, out_dim]
        """
        adjacency = as_adjacency(graph, x.size(0))
        if not self.hidden_layers:
            return _conv(self.out, feature_dropout(x, self.dropout.p, self.training), adjacency)
        return _conv(self.out, self.dropout(self.embed(x, adjacency)), adjacency)


def dense_or_sparse_linear(x, weight: torch.Tensor) -> torch.Tensor:
    r""":math:`xW^\top` for dense ``x`` (a plain matmul) or :class:`SparseFeatures` (a sparse ×
    dense product over the stored values), differentiable in ``weight``.

    Args:
        x: node features, dense or :class:`SparseFeatures`.
        weight: the weight.

    Returns:
        xW^T.

    Shapes:
        x: [n, F]
        weight: [out, F]
        return: [n, out]
    """
    return x.linear(weight) if isinstance(x, SparseFeatures) else F.linear(x, weight)


def _conv(conv: nn.Module, x, adjacency: Adjacency) -> torch.Tensor:
    r"""One PyG layer's function over ``adjacency``; its linear maps run first (dense matmul, or
    one CSR × dense product for :class:`SparseFeatures`), the (linear) aggregation after — the
    same function, since aggregation and a linear map commute:

    * SAGE-mean: :math:`W_l\,\mathrm{mean}_{j\in N(i)} x_j + b_l + W_r x_i
      = \mathrm{mean}_{j\in N(i)}(W_l x_j) + b_l + W_r x_i`;
    * GCN: :math:`\hat A (X W^\top) + b` with ``gcn_norm``'s weights
      (:meth:`~dpaudit.data.adjacency.Adjacency.gcn`).
    """
    if isinstance(conv, SAGEConv) and conv.root_weight and not conv.project and not conv.normalize:
        out_dim = conv.lin_l.weight.size(0)
        both = dense_or_sparse_linear(x, torch.cat([conv.lin_l.weight, conv.lin_r.weight], dim=0))
        out = adjacency.mean(both.dtype)(both[:, :out_dim]) + both[:, out_dim:]
        return out if conv.lin_l.bias is None else out + conv.lin_l.bias
    if isinstance(conv, GCNConv) and conv.normalize and conv.add_self_loops and not conv.improved:
        out = adjacency.gcn(conv.lin.weight.dtype)(dense_or_sparse_linear(x, conv.lin.weight))
        return out if conv.bias is None else out + conv.bias
    raise ModelFormatError(f"unsupported message-passing layer {conv!r}")


#: the layers a declared stack may hold (:class:`LayerStack`): op → (class, the constructor
#: options a declaration may set, with their types). Every other option keeps PyG's default.
STACK_LAYERS: dict[str, tuple[type, dict[str, type]]] = {
    "linear": (nn.Linear, {"bias": bool}),
    "gcn": (GCNConv, {"improved": bool, "add_self_loops": bool, "normalize": bool, "bias": bool}),
    "sage": (SAGEConv, {"aggr": str, "normalize": bool, "root_weight": bool, "project": bool, "bias": bool}),
    "gat": (GATConv, {"heads": int, "concat": bool, "negative_slope": float, "add_self_loops": bool, "bias": bool}),
}
#: the message-passing layers a :class:`GNN` stacks (PyG's GCN and GraphSAGE convolutions)
GNN_CONVS = tuple(op for op, (cls, _) in STACK_LAYERS.items() if cls in (GCNConv, SAGEConv))


class LayerStack(nn.Module):
    """A declared stack of PyG / torch layers with one activation between consecutive layers:
    ``layers[-1](act(... act(layers[0](x, edge_index)) ...))``, each message-passing layer called
    as PyG calls it (``conv(x, edge_index)``), each ``linear`` on ``x`` alone.

    How a user's module is exported (:func:`dpaudit.training.adapters.export`): declared, never
    code. ``layers`` are ``{"op": "linear"|"gcn"|"sage"|"gat", "in": F, "out": H, ...options}``
    (:data:`STACK_LAYERS`). Shapes: ``x`` [n, F], ``edge_index`` [2, E] → logits [n, C];
    :meth:`embed` is the penultimate representation (the input for a one-layer stack).

    Args:
        layers: the layer declarations.
        act: activation name between layers.

    Raises:
        ModelFormatError: an unknown layer, option or activation, or non-positive sizes.
    """

    def __init__(self, layers: list[dict], act: str = "relu"):
        super().__init__()
        self.declaration = [dict(layer) for layer in layers]
        self.layers = nn.ModuleList(_stack_layer(layer) for layer in layers)
        self.act = activation(act)

    def _call_layer(self, layer: nn.Module, x, edge_index):
        return layer(x) if isinstance(layer, nn.Linear) else layer(x, edge_index)

    def embed(self, x, edge_index: torch.Tensor | None = None) -> torch.Tensor:
        """Args:
            x: node features.
            edge_index: the edges, or ``None`` for a stack of linear layers.

        Returns:
            The input of the last layer.
        """
        for layer in self.layers[:-1]:
            x = self.act(self._call_layer(layer, x, edge_index))
        return x

    def forward(self, x, edge_index: torch.Tensor | None = None) -> torch.Tensor:
        """Args:
            x: node features.
            edge_index: the edges, or ``None`` for a stack of linear layers.

        Returns:
            Logits.

        Shapes:
            x: [n, F]
            edge_index: [2, E]
            return: [n, C]
        """
        return self._call_layer(self.layers[-1], self.embed(x, edge_index), edge_index)


def _stack_layer(layer: dict) -> nn.Module:
    op = layer.get("op")
    if op not in STACK_LAYERS:
        raise ModelFormatError(f"unknown stack layer {op!r}; known: {', '.join(STACK_LAYERS)}")
    cls, options = STACK_LAYERS[op]
    extra = set(layer) - {"op", "in", "out", *options}
    if extra:
        raise ModelFormatError(f"stack layer {op!r} takes no options {sorted(extra)}")
    kwargs = {}
    for key, kind in options.items():
        if key in layer:
            value = layer[key]
            if kind is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                raise ModelFormatError(f"stack layer {op!r}: {key} must be {kind.__name__}, got {value!r}")
            kwargs[key] = value
    size = layer.get("in"), layer.get("out")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in size):
        raise ModelFormatError(f"stack layer {op!r}: in and out must be positive integers, got {size}")
    return cls(*size, **kwargs)


def build_architecture(config: dict) -> nn.Module:
    """Build ``{"type": "mlp"|"gcn"|"sage", "in_dim", "hidden", "out_dim", ...}`` or
    ``{"type": "stack", "layers": [...], "act": ...}`` (:class:`LayerStack`).

    Args:
        config: the architecture config.

    Returns:
        The module (untrained).

    Raises:
        ModelFormatError: a malformed config or an unknown type.
    """
    if isinstance(config, dict) and config.get("type") == "stack":
        layers = config.get("layers")
        if not isinstance(layers, list) or not layers or not all(isinstance(layer, dict) for layer in layers):
            raise ModelFormatError("malformed architecture config: a stack needs a non-empty list of layers")
        return LayerStack(layers, str(config.get("act", "relu")))
    try:
        kind = config["type"]
        common = dict(
            in_dim=int(config["in_dim"]),
            hidden=[int(h) for h in config["hidden"]],
            out_dim=int(config["out_dim"]),
            dropout=float(config.get("dropout", 0.0)),
            act=str(config.get("act", "relu")),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelFormatError(f"malformed architecture config: {exc}") from None
    if kind == "mlp":
        return MLP(**common)
    if kind in GNN_CONVS:
        return GNN(kind, **common)
    raise ModelFormatError(f"unknown architecture type {kind!r}")
