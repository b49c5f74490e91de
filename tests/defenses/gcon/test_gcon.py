"""Tests of the GCON defense (issues 5, 23): Lemma 2 on real graphs, the propagation matrices, the
noise sampler (Algorithm 2), the loss-derivative suprema (Appendix F), Theorem 1's parameters
against hand-worked examples and against an exact privacy-loss computation on Cora, the fixed
descent schedule and its residual bound (cora_ml), AMP, release neutrality (G vs G − one edge),
the plan re-derived on load, the released model's save/load and inference locality, and input
validation."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import torch
from editing import edited_copy
from scipy import stats

import dpaudit.release.model
from defenses.gcon import GCON, PAPER_GRID, parse_grid
from defenses.gcon.homophily import homophily_mechanism
from defenses.gcon.mechanism import (
    MultiLabelSoftMargin,
    PseudoHuber,
    amp_noise_multiplier,
    amp_sensitivity,
    descend,
    descent_schedule,
    erlang_tail_quantile,
    gaussian_delta,
    gcon_features,
    normalized_adjacency,
    one_hop_features,
    parse_steps,
    perturbed_objective,
    ppr_iterations,
    project_columns,
    propagate,
    psi_metric,
    sample_objective_noise,
    sensitivity_psi,
    solve_perturbed_objective,
    theorem1_parameters,
)
from defenses.gcon.plan import plan_configuration
from defenses.gcon.protocols import default_config, grid_configs
from dpaudit.data.splits import make_split
from dpaudit.errors import ConfigurationError, DPAuditError, IntegrityError, ModelFormatError
from dpaudit.release.model import compare_records
from dpaudit.testing.neighbours import train_and_compare, without_edge
from dpaudit.training.registry import get_defense

STEPS = [1, 2, 5, 10, math.inf]


def _unit_rows(n: int, dim: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.nn.functional.normalize(torch.randn(n, dim, generator=g, dtype=torch.float64), dim=1)


def _remove_edge(edge_index: torch.Tensor, u: int, v: int) -> torch.Tensor:
    keep = ~(((edge_index[0] == u) & (edge_index[1] == v)) | ((edge_index[0] == v) & (edge_index[1] == u)))
    return edge_index[:, keep]


# ------------------------------------------------------------------------------ Lemma 2


def test_lemma2_psi_bound_on_cora_random_edge_removals(load_real):
    """ψ(Z_m) ≤ Ψ(Z_m) = 2(1−α)/α·[1 − (1−α)^m] for removed random edges of Cora, m ∈ {1,2,5,10,∞}.

    Features are unit vectors in 2 dimensions (strongly coherent/opposed neighbours make ψ
    large) and the removed edges include ones between low-degree nodes, where the bound is tightest."""
    data = load_real("cora").data
    n, edge_index = data.num_nodes, data.edge_index
    x = _unit_rows(n, 2, seed=0)
    adj = normalized_adjacency(edge_index, n)
    degree = torch.bincount(edge_index[0], minlength=n)
    g = torch.Generator().manual_seed(0)
    upper = edge_index[:, edge_index[0] < edge_index[1]]
    low = upper[:, (degree[upper[0]] <= 2) & (degree[upper[1]] <= 2)]
    chosen = torch.cat([upper[:, torch.randperm(upper.size(1), generator=g)[:4]], low[:, :4]], dim=1)
    worst_ratio = 0.0
    for u, v in chosen.t().tolist():
        adj_prime = normalized_adjacency(_remove_edge(edge_index, u, v), n)
        for alpha in (0.2, 0.6):
            for m in STEPS:
                psi = psi_metric(propagate(adj, x, alpha, m), propagate(adj_prime, x, alpha, m))
                bound = sensitivity_psi(alpha, [m])
                assert psi <= bound * (1 + 1e-9), (u, v, alpha, m, psi, bound)
                worst_ratio = max(worst_ratio, psi / bound)
        # Eq. (26): the concatenation (1/s)(Z_1 ⊕ Z_∞) obeys the averaged bound
        steps = [1, math.inf]
        psi_cat = psi_metric(gcon_features(adj, x, 0.4, steps), gcon_features(adj_prime, x, 0.4, steps))
        assert psi_cat <= sensitivity_psi(0.4, steps) * (1 + 1e-9)
    assert worst_ratio > 0.05  # the removals really moved Z (the check is not vacuous)


def test_lemma2_is_tight_for_one_step_and_formula_values():
    """On an isolated edge with opposite unit features, removing the edge moves Z_1 by exactly
    Ψ(Z_1) = 2(1−α): the bound is attained, so a constant-factor error in Ψ would be caught."""
    edge_index = torch.tensor([[0, 1], [1, 0]])
    x = torch.tensor([[1.0, 0.0], [-1.0, 0.0]], dtype=torch.float64)
    adj, adj_prime = normalized_adjacency(edge_index, 2), normalized_adjacency(torch.zeros(2, 0, dtype=torch.long), 2)
    for alpha in (0.2, 0.5, 0.9):
        psi = psi_metric(propagate(adj, x, alpha, 1), propagate(adj_prime, x, alpha, 1))
        assert psi == pytest.approx(2 * (1 - alpha), rel=1e-12)
        assert sensitivity_psi(alpha, [1]) == pytest.approx(2 * (1 - alpha), rel=1e-12)
    # hand values: α = 0.6, m = 2: 2·0.4/0.6·(1 − 0.16) = 1.12; m = ∞: 2·0.4/0.6 = 4/3; m = 0: 0
    assert sensitivity_psi(0.6, [2]) == pytest.approx(1.12)
    assert sensitivity_psi(0.6, [math.inf]) == pytest.approx(4 / 3)
    assert sensitivity_psi(0.6, [0]) == 0.0
    assert sensitivity_psi(0.6, [0, 2]) == pytest.approx(0.56)


def test_hop0_block_reads_no_edge_and_the_halved_bound_is_attained():
    """A hop-0 block (m = 0: R_0 X̄ = X̄, the encoded features alone) reads no edge, so it adds 0 to
    Lemma 2's sum and Z = ½(X̄ ⊕ R_1 X̄) has Ψ = ½·2(1−α) = 1−α. On the isolated edge with opposite
    unit features the removal moves Z by exactly that: the hop-0 columns do not move at all and the
    hop-1 columns move by the full 2(1−α), scaled by 1/s. A bound halved again (or the hop-0 block
    wrongly counted as reading edges, doubling it) would be caught from either side."""
    edge_index = torch.tensor([[0, 1], [1, 0]])
    x = torch.tensor([[1.0, 0.0], [-1.0, 0.0]], dtype=torch.float64)
    adj, adj_prime = normalized_adjacency(edge_index, 2), normalized_adjacency(torch.zeros(2, 0, dtype=torch.long), 2)
    for alpha in (0.2, 0.5, 0.9):
        z, z_prime = gcon_features(adj, x, alpha, [0, 1]), gcon_features(adj_prime, x, alpha, [0, 1])
        assert torch.equal(z[:, :2], z_prime[:, :2])  # the hop-0 block is the same on both graphs
        psi, bound = psi_metric(z, z_prime), sensitivity_psi(alpha, [0, 1])
        assert bound == pytest.approx(1 - alpha, rel=1e-12)
        assert psi == pytest.approx(bound, rel=1e-12)  # attained: Ψ/2 would be exceeded
        assert psi > 0.75 * bound


# ------------------------------------------------------------------------------ propagation


def test_propagation_rows_sum_to_one_and_ppr_matches_dense_inverse(small_graph):
    data = small_graph.data
    n = data.num_nodes
    adj = normalized_adjacency(data.edge_index, n)
    dense = adj.to_dense()
    assert torch.allclose(dense.sum(1), torch.ones(n, dtype=torch.float64))
    ones = torch.ones(n, 1, dtype=torch.float64)
    identity = torch.eye(n, dtype=torch.float64)
    alpha = 0.3
    for m in STEPS:
        assert torch.allclose(propagate(adj, ones, alpha, m), ones, atol=1e-12)  # R_m 1 = 1
        r_m = propagate(adj, identity, alpha, m)
        assert r_m.min() >= 0  # Lemma 1: non-negative entries
    # Eq. (6) closed form for m = 3, and R_∞ = α(I − (1−α)Ã)^{-1} against a dense inverse
    closed = sum(alpha * (1 - alpha) ** i * torch.linalg.matrix_power(dense, i) for i in range(3))
    closed = closed + (1 - alpha) ** 3 * torch.linalg.matrix_power(dense, 3)
    assert torch.allclose(propagate(adj, identity, alpha, 3), closed, atol=1e-12)
    r_inf = alpha * torch.linalg.inv(identity - (1 - alpha) * dense)
    x = _unit_rows(n, 4, seed=1)
    assert (propagate(adj, x, alpha, math.inf) - r_inf @ x).norm(dim=1).max() <= 1e-12
    assert ppr_iterations(0.5, 1e-12) == math.ceil(math.log(0.5e-12) / math.log(0.5))


def test_one_hop_inference_reads_only_the_query_nodes_edges(small_graph):
    """Eq. (16): node v's features change only when an edge incident to v changes."""
    data = small_graph.data
    n = data.num_nodes
    x = _unit_rows(n, 3, seed=2)
    u, v = data.edge_index[:, 0].tolist()
    adj, adj_prime = (
        normalized_adjacency(data.edge_index, n),
        normalized_adjacency(_remove_edge(data.edge_index, u, v), n),
    )
    before, after = one_hop_features(adj, x, 0.6, [2]), one_hop_features(adj_prime, x, 0.6, [2])
    moved = (before - after).norm(dim=1) > 1e-14
    assert set(moved.nonzero().view(-1).tolist()) == {u, v}
    full_moved = (gcon_features(adj, x, 0.6, [2]) - gcon_features(adj_prime, x, 0.6, [2])).norm(dim=1) > 1e-14
    assert full_moved.sum() > 2  # the multi-hop training features do depend on farther edges


# ------------------------------------------------------------------------------ noise (Algorithm 2)


def test_noise_radius_is_erlang_and_direction_uniform():
    d, beta, count = 6, 0.7, 4000
    b = sample_objective_noise(d, count, beta, np.random.default_rng(0))
    assert b.shape == (d, count)
    radius = np.linalg.norm(b, axis=0)
    assert stats.kstest(radius, stats.gamma(a=d, scale=1 / beta).cdf).pvalue > 1e-3
    # power check: the test rejects a wrong shape or rate
    assert stats.kstest(radius, stats.gamma(a=d + 1, scale=1 / beta).cdf).pvalue < 1e-6
    assert stats.kstest(radius, stats.gamma(a=d, scale=1.2 / beta).cdf).pvalue < 1e-6
    # uniform direction on S^{d-1}: u_k^2 ~ Beta(1/2, (d-1)/2) for every axis, mean ≈ 0, E[uu^T] = I/d
    u = b / radius
    for k in range(d):
        assert stats.kstest(u[k] ** 2, stats.beta(0.5, (d - 1) / 2).cdf).pvalue > 1e-3
    assert np.abs(u.mean(axis=1)).max() < 4 / math.sqrt(count)
    assert np.abs(u @ u.T / count - np.eye(d) / d).max() < 0.02
    assert np.all(sample_objective_noise(d, 3, math.inf, np.random.default_rng(0)) == 0)


# ------------------------------------------------------------------------------ losses (Appendix F)


@pytest.mark.parametrize("loss", [MultiLabelSoftMargin(3), PseudoHuber(3, 0.2), PseudoHuber(5, 1.0)])
def test_loss_derivatives_and_suprema_match_autograd_maxima(loss):
    """ℓ', ℓ'', ℓ''' by autograd of the loss itself (independent of the closed forms) on a fine grid:
    they match the closed forms, and their maxima approach (and never exceed) c₁, c₂, c₃."""
    c1, c2, c3 = loss.suprema()
    x = torch.linspace(-40, 40, 400001, dtype=torch.float64, requires_grad=True)
    for y in (0.0, 1.0):
        value = loss.torch_value(x, torch.full_like(x, y))
        (g1,) = torch.autograd.grad(value.sum(), x, create_graph=True)
        (g2,) = torch.autograd.grad(g1.sum(), x, create_graph=True)
        (g3,) = torch.autograd.grad(g2.sum(), x)
        xs, ys = x.detach().numpy(), np.full(x.shape, y)
        for auto, closed, sup in ((g1, loss.d1, c1), (g2, loss.d2, c2), (g3, loss.d3, c3)):
            auto = auto.detach().numpy()
            assert np.allclose(auto, closed(xs, ys), atol=1e-12)
            assert np.abs(auto).max() <= sup * (1 + 1e-9)
            assert np.abs(auto).max() >= sup * (1 - 2e-3)  # grid maximum reaches the supremum
        assert np.allclose(value.detach().numpy(), loss.value(xs, ys), atol=1e-12)


def test_loss_suprema_closed_forms():
    assert MultiLabelSoftMargin(4).suprema() == pytest.approx((1 / 4, 1 / 16, 1 / (6 * math.sqrt(3) * 4)))
    assert PseudoHuber(2, 0.5).suprema() == pytest.approx((0.25, 0.5, 48 * math.sqrt(5) / (125 * 2 * 0.5)))


# ------------------------------------------------------------------------------ Theorem 1


def test_theorem1_hand_worked_example_without_lambda_prime():
    """MSL, c = 2, d = 1, n₁ = 10, ε = 1, ω = 0.5, δ = 2e⁻⁵, α = 0.5, m = 1, Λ = 1, ξ = 0.1.

    c₁ = 1/2, c₂ = 1/8, c₃ = 1/(12√3).  Ψ = 2·0.5/0.5·(1 − 0.5) = 1.
    c_sf: Gamma(1, 1) = Exp(1), tail δ/c = e⁻⁵  ⇒  c_sf = 5.   n₁ωε = 5.
    Eq. 22: c·c₂·Ψ·c_sf/(n₁ωε) + ξ = 2·(1/8)·5/5 + 0.1 = 0.35 < 1  ⇒  Λ = 1.
    Eq. 23: c_θ = (5·0.5 + 2·0.5·1·5)/(5·1 − 2·(1/8)·5) = 7.5/3.75 = 2.
    Eq. 24: ε_Λ = 2·ln(1 + (2/8 + 2/(12√3))·1/10) = 2·ln(1.0346225) = 0.0680733.
    ε_Λ ≤ (1 − ω)ε = 0.5  ⇒  Λ′ = 0.
    Eq. 18: β = max(1 − 0.0680733, 0.5)/(2·(0.5 + (1/8)·2)·1) = 0.9319267/1.5 = 0.6212845.
    """
    p = theorem1_parameters(1.0, 2 * math.exp(-5), 2, 1, 10, 1.0, 0.5, MultiLabelSoftMargin(2).suprema(), 1.0, 0.1)
    assert p.c_sf == pytest.approx(5.0, rel=1e-9)
    assert p.regularization == 1.0
    assert p.c_theta == pytest.approx(2.0, rel=1e-9)
    assert p.epsilon_lambda == pytest.approx(0.0680733, abs=1e-7)
    assert p.lambda_prime == 0.0
    assert p.beta == pytest.approx(0.6212845, abs=1e-7)
    eps, delta = p.guarantee()
    assert 1.0 - 1e-9 <= eps <= 1.0  # Λ′ = 0: ε_Λ + (ε − ε_Λ) = ε (β shrunk by 1e-12 for rounding)
    assert delta <= 2 * math.exp(-5) * (1 + 1e-9)


def test_theorem1_hand_worked_example_with_raised_lambda_and_lambda_prime():
    """pseudo-Huber δ_l = 1, c = 1, d = 1, n₁ = 4, ε = 1, ω = 0.5, δ = e⁻³, α = 0.5, m = ∞, Λ = 0.5, ξ = 1.

    c₁ = 1, c₂ = 1, c₃ = 48√5/125 = 0.8586501.  Ψ = 2·0.5/0.5 = 2.  c_sf = 3.  n₁ωε = 2.
    Eq. 22: 1·1·2·3/2 + 1 = 4 > 0.5  ⇒  Λ = 4 (raised).
    Eq. 23: c_θ = (2·1 + 1·1·2·3)/(2·4 − 1·1·2·3) = 8/2 = 4.
    2c₂ + c₃c_θ = 2 + 3.4346004 = 5.4346004.
    Eq. 24: ε_Λ = ln(1 + 5.4346004·2/(1·4·4)) = ln(1.6793251) = 0.5183920 > (1 − ω)ε = 0.5.
    Eq. 17: Λ′ = 1·5.4346004·2/(4·0.5·1) − 4 = 5.4346004 − 4 = 1.4346004.
    Eq. 18: β = max(1 − 0.5183920, 0.5)/(1·(1 + 1·4)·2) = 0.5/10 = 0.05.
    Re-derived: ε_J = ln(1 + 5.4346004·2/(4·5.4346004)) = ln 1.5 = 0.4054651, ε_B = 0.05·5·2 = 0.5.
    """
    p = theorem1_parameters(1.0, math.exp(-3), 1, 1, 4, 0.5, 0.5, PseudoHuber(1, 1.0).suprema(), 2.0, 1.0)
    assert p.c_sf == pytest.approx(3.0, rel=1e-9)
    assert p.regularization == pytest.approx(4.0, rel=1e-9)
    assert p.c_theta == pytest.approx(4.0, rel=1e-9)
    assert p.epsilon_lambda == pytest.approx(0.5183920, abs=1e-7)
    assert p.lambda_prime == pytest.approx(1.4346004, abs=1e-7)
    assert p.beta == pytest.approx(0.05, rel=1e-9)
    eps, delta = p.guarantee()
    assert eps == pytest.approx(math.log(1.5) + 0.5, abs=1e-7)
    assert delta <= math.exp(-3) * (1 + 1e-9)


def test_theorem1_rederived_guarantee_never_exceeds_target():
    rng = np.random.default_rng(0)
    for _ in range(300):
        c, d = int(rng.integers(2, 10)), int(rng.integers(1, 65))
        eps = float(rng.choice([0.1, 0.5, 1, 4, 16]))
        delta = float(10 ** -rng.uniform(3, 10))
        loss = MultiLabelSoftMargin(c) if rng.random() < 0.5 else PseudoHuber(c, float(rng.choice([0.1, 0.5])))
        p = theorem1_parameters(
            eps,
            delta,
            c,
            d,
            int(rng.integers(10, 20000)),
            float(rng.choice([0.01, 0.2, 2])),
            float(rng.uniform(0.5, 0.95)),
            loss.suprema(),
            float(rng.uniform(0.1, 8)),
            float(rng.choice([1e-3, 0.1])),
        )
        spent_eps, spent_delta = p.guarantee()
        assert spent_eps <= eps and spent_delta <= delta * (1 + 1e-9)
        assert p.lambda_prime >= 0 and p.beta > 0 and p.regularization >= p.regularization_requested
    assert stats.gamma.sf(erlang_tail_quantile(16, 1e-7), 16) <= 1e-7


def test_theorem1_privacy_loss_on_cora_edge_removal(load_real):
    """The exact privacy loss of Θ_priv for Cora and Cora minus one edge stays within ε.

    For the released Θ (on D), the noise that would produce the same Θ on D′ is
    B′ = −n₁∇(L_Λ + Λ′/2‖Θ‖²)(Θ; Z′) (Eq. 40); the log density ratio is
    Σ_j [β(‖b′_j‖ − ‖b_j‖) + log|det J_j(D)| − log|det J_j(D′)|], J_j = ∂b_j/∂θ_j (Lemmas 7–8)."""
    data = load_real("cora").data
    n, c, d, eps = data.num_nodes, 7, 4, 1.0
    x = _unit_rows(n, d, seed=3)
    y = torch.nn.functional.one_hot(data.y, c).double().numpy()
    alpha, steps = 0.4, [2]
    loss = MultiLabelSoftMargin(c)
    psi = sensitivity_psi(alpha, steps)
    p = theorem1_parameters(eps, 1e-5, c, d, n, 0.2, 0.9, loss.suprema(), psi, 0.1)
    reg = p.regularization + p.lambda_prime
    z = gcon_features(normalized_adjacency(data.edge_index, n), x, alpha, steps).numpy()
    rng = np.random.default_rng(0)
    edges = data.edge_index[:, data.edge_index[0] < data.edge_index[1]]
    worst = 0.0
    for _ in range(6):
        u, v = edges[:, int(rng.integers(edges.size(1)))].tolist()
        z_prime = gcon_features(normalized_adjacency(_remove_edge(data.edge_index, u, v), n), x, alpha, steps).numpy()
        noise = sample_objective_noise(d, c, p.beta, rng)
        theta, info = solve_perturbed_objective(z, y, loss, reg, noise, grad_tol=1e-10)
        assert info.converged
        assert np.linalg.norm(theta, axis=0).max() <= p.c_theta  # the good event of Lemma 9
        # recovered noise on D (sanity: equals the sampled B) and on D′
        _, grad = perturbed_objective(theta, z, y, loss, reg, np.zeros_like(noise))
        _, grad_prime = perturbed_objective(theta, z_prime, y, loss, reg, np.zeros_like(noise))
        b, b_prime = -n * grad, -n * grad_prime
        assert np.allclose(b, noise, atol=1e-6 * np.abs(noise).max())
        # Lemma 8: ‖b′_j − b_j‖ ≤ (c₁ + c₂c_θ)Ψ
        assert np.linalg.norm(b_prime - b, axis=0).max() <= (p.c1 + p.c2 * p.c_theta) * psi
        log_ratio = p.beta * float(np.sum(np.linalg.norm(b_prime, axis=0) - np.linalg.norm(b, axis=0)))
        for j in range(c):
            for zz, sign in ((z, 1.0), (z_prime, -1.0)):
                curvature = loss.d2(zz @ theta[:, j], y[:, j])
                jac = (zz * curvature[:, None]).T @ zz + n * reg * np.eye(d)
                log_ratio += sign * np.linalg.slogdet(jac)[1]
        assert abs(log_ratio) <= eps
        worst = max(worst, abs(log_ratio))
    assert worst > 0  # the edge changes the output density at all


def _privacy_loss(theta, z, z_prime, y, loss, p, beta):
    """log g(Θ|D) − log g(Θ|D′) of Eq. (41) with the correct change of variables (see defenses.gcon.mechanism)."""
    n, (d, c) = z.shape[0], theta.shape
    reg = p.regularization + p.lambda_prime
    _, grad = perturbed_objective(theta, z, y, loss, reg, np.zeros((d, c)))
    _, grad_prime = perturbed_objective(theta, z_prime, y, loss, reg, np.zeros((d, c)))
    out = beta * float(np.sum(np.linalg.norm(-n * grad_prime, axis=0) - np.linalg.norm(-n * grad, axis=0)))
    for j in range(c):
        for zz, sign in ((z, 1.0), (z_prime, -1.0)):
            curvature = loss.d2(zz @ theta[:, j], y[:, j])
            out += sign * np.linalg.slogdet((zz * curvature[:, None]).T @ zz + n * reg * np.eye(d))[1]
    return out


def test_theorem1_worst_case_privacy_loss_on_a_tight_instance():
    """Where Lemma 2 is tight (an isolated edge between opposite unit features, m = 1), maximise the
    privacy loss over Θ in Lemma 9's good set {‖θ_j‖ ≤ c_θ}: it must stay ≤ ε, and be a sizeable
    fraction of ε (so an underestimated Ψ or β would push it over — checked with 3β)."""
    from scipy import optimize

    n, d, c, eps = 40, 2, 2, 1.0
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, d))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    x[1] = -x[0]
    pairs = torch.arange(n).view(-1, 2).t()
    edge_index = torch.cat([pairs, pairs.flip(0)], dim=1)
    y = np.eye(c)[np.arange(n) % 2]
    loss, alpha, steps = MultiLabelSoftMargin(c), 0.5, [1]
    psi = sensitivity_psi(alpha, steps)
    p = theorem1_parameters(eps, 1e-3, c, d, n, 0.2, 0.9, loss.suprema(), psi, 0.1)
    xt = torch.tensor(x)
    z = gcon_features(normalized_adjacency(edge_index, n), xt, alpha, steps).numpy()
    z_prime = gcon_features(normalized_adjacency(_remove_edge(edge_index, 0, 1), n), xt, alpha, steps).numpy()
    assert psi_metric(torch.tensor(z), torch.tensor(z_prime)) == pytest.approx(psi)  # Lemma 2 attained

    def inside(flat):
        return np.linalg.norm(flat.reshape(d, c), axis=0).max() <= p.c_theta

    worst, worst_theta = 0.0, None
    for _ in range(30):
        start = rng.standard_normal(d * c) * p.c_theta / 2
        for sign in (1.0, -1.0):

            def objective(flat, sign=sign):
                excess = max(0.0, np.linalg.norm(flat.reshape(d, c), axis=0).max() - p.c_theta)
                return -sign * _privacy_loss(flat.reshape(d, c), z, z_prime, y, loss, p, p.beta) + 1e3 * excess**2

            result = optimize.minimize(objective, start, method="Nelder-Mead")
            if inside(result.x):
                value = abs(_privacy_loss(result.x.reshape(d, c), z, z_prime, y, loss, p, p.beta))
                if value > worst:
                    worst, worst_theta = value, result.x.reshape(d, c)
    assert 0.2 * eps <= worst <= eps
    assert abs(_privacy_loss(worst_theta, z, z_prime, y, loss, p, 3 * p.beta)) > eps


# ------------------------------------------------------------------------------ optimisation


def test_solver_reaches_tolerance_checked_by_autograd():
    rng = np.random.default_rng(1)
    n1, d, c = 200, 6, 3
    z = rng.standard_normal((n1, d))
    z /= np.linalg.norm(z, axis=1, keepdims=True)
    y = np.eye(c)[rng.integers(0, c, n1)]
    for loss in (MultiLabelSoftMargin(c), PseudoHuber(c, 0.2)):
        noise = sample_objective_noise(d, c, 0.5, rng)
        theta, info = solve_perturbed_objective(z, y, loss, 0.05, noise, grad_tol=1e-9)
        t = torch.tensor(theta, requires_grad=True)
        zt, yt = torch.tensor(z), torch.tensor(y)
        objective = (
            loss.torch_value(zt @ t, yt).sum() / n1 + 0.025 * (t * t).sum() + (torch.tensor(noise) * t).sum() / n1
        )
        (grad,) = torch.autograd.grad(objective, t)
        assert info.converged and info.grad_tol == 1e-9
        assert float(grad.norm()) <= 1e-9 * (1 + 1e-6)


def test_warm_start_never_raises_and_reports_privately():
    """The warm start has no convergence requirement: with a budget far too small it returns its
    iterate and says so in its (owner-only) diagnostics instead of refusing."""
    rng = np.random.default_rng(2)
    z = rng.standard_normal((50, 4))
    z /= np.linalg.norm(z, axis=1, keepdims=True)
    y = np.eye(2)[rng.integers(0, 2, 50)]
    theta, info = solve_perturbed_objective(
        z,
        y,
        MultiLabelSoftMargin(2),
        1e-4,
        np.zeros((4, 2)),
        grad_tol=1e-300,
        max_iter=1,
        max_restarts=0,
        max_newton=0,
    )
    assert not info.converged and info.iterations == 1 and info.grad_norm > 1e-300
    assert np.isfinite(theta).all()


def test_descent_schedule_hand_worked_example():
    """Theorem 1's first hand example (MSL, c = 2, d = 1: Λ = 1, Λ′ = 0, c_θ = 2, c₂ = 1/8).

    s = 1: μ = 1, L = 1 + 1/8 = 1.125, ρ = 1 − μ/L = 1/9, diameter 2√2·2 = 4√2 = 5.656854.
    Tolerance 1e-6: 4√2/9⁷ = 1.18e-6 > 1e-6 ≥ 4√2/9⁸ = 1.314e-7, so T = 8.
    s = 2 halves the curvature bound (‖z_i‖² ≤ 1/2): L = 1.0625, ρ = 1/17, 4√2/17⁵ = 3.98e-6 > 1e-6 ≥ 4√2/17⁶.
    A cap of 3 steps gives T = 3 and the bound 4√2/9³ = 7.76e-3 (released with the larger noise)."""
    p = theorem1_parameters(1.0, 2 * math.exp(-5), 2, 1, 10, 1.0, 0.5, MultiLabelSoftMargin(2).suprema(), 1.0, 0.1)
    schedule = descent_schedule(p, 1, 1e-6, 10000)
    assert schedule.strong_convexity == 1.0 and schedule.smoothness == pytest.approx(1.125)
    assert schedule.contraction == pytest.approx(1 / 9) and schedule.radius == pytest.approx(2.0)
    assert schedule.diameter == pytest.approx(4 * math.sqrt(2))
    assert schedule.steps == 8 and schedule.residual_bound == pytest.approx(4 * math.sqrt(2) / 9**8)
    two_blocks = descent_schedule(p, 2, 1e-6, 10000)
    assert two_blocks.contraction == pytest.approx(1 / 17) and two_blocks.steps == 6
    capped = descent_schedule(p, 1, 1e-6, 3)
    assert capped.steps == 3 and capped.residual_bound == pytest.approx(4 * math.sqrt(2) / 9**3)
    assert amp_sensitivity(capped.residual_bound) == pytest.approx(2 * 4 * math.sqrt(2) / 9**3)
    assert descent_schedule(p, 1, 10.0, 100).steps == 0  # the projection alone is within tolerance
    with pytest.raises(ConfigurationError):
        descent_schedule(p, 1, 0.0, 100)
    with pytest.raises(ConfigurationError):
        amp_sensitivity(math.inf)


def test_fixed_schedule_residual_bound_holds_on_cora_ml(load_real):
    """On cora_ml's graph (real propagation, s = 2 blocks, n₁ = n, Theorem 1's Λ and noise B) the
    schedule's bound holds with no convergence check: from the far side of Theorem 1's ball (a start
    outside it is projected first) T fixed steps end within ρ^T·2√c·c_θ of the exact minimiser.

    The per-step contraction ρ = 1 − μ/L is tight: along the Hessian's flattest direction at Θ_priv
    the error shrinks by ρ per step up to 1e-5 (relative), so the check fails if the bound
    ρ^k·‖Θ₀ − Θ_priv‖ is halved (checked: a contraction 0.87ρ, 0.87⁵ ≈ ½, fails it)."""
    data = load_real("cora_ml").data
    n, c = data.num_nodes, int(data.y.max()) + 1
    projection = torch.randn(data.x.size(1), 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    encoded = torch.nn.functional.normalize(data.x.double() @ projection, dim=1)
    steps = [2.0, math.inf]
    z = gcon_features(normalized_adjacency(data.edge_index, n), encoded, 0.6, steps).numpy()
    assert (np.linalg.norm(z, axis=1) ** 2).max() <= 1 / len(steps) * (1 + 1e-12)  # the 1/s that L uses
    y = np.eye(c)[data.y.numpy()]
    loss = MultiLabelSoftMargin(c)
    d = z.shape[1]
    p = theorem1_parameters(0.99, 0.99e-5, c, d, n, 0.2, 0.9, loss.suprema(), sensitivity_psi(0.6, steps), 0.1)
    noise = sample_objective_noise(d, c, p.beta, np.random.default_rng(0))
    mu = p.regularization + p.lambda_prime
    exact, info = solve_perturbed_objective(z, y, loss, mu, noise, grad_tol=1e-13)
    assert info.converged  # ‖exact − Θ_priv‖ ≤ 1e-13/μ, far below what is measured here
    assert np.linalg.norm(exact, axis=0).max() <= p.c_theta  # Theorem 1's good event
    schedule = descent_schedule(p, len(steps), 1e-6, 10000)
    assert schedule.steps >= 3

    antipode = -3 * p.c_theta * exact / np.linalg.norm(exact, axis=0)
    final = descend(project_columns(antipode, schedule.radius), z, y, loss, noise, schedule)
    assert np.linalg.norm(final - exact) <= schedule.residual_bound

    curvature = loss.d2(z @ exact, y)
    for j in range(c):
        hessian = (z * curvature[:, j : j + 1]).T @ z / n + mu * np.eye(d)
        flattest = np.linalg.eigh(hessian)[1][:, 0]
        start = exact.copy()
        start[:, j] += 1e-3 * flattest
        for count in (1, 3, 5):
            end = descend(start, z, y, loss, noise, dataclasses.replace(schedule, steps=count))
            bound = schedule.contraction**count * 1e-3
            assert bound / 2 < np.linalg.norm(end - exact) <= bound


def test_amp_noise_multiplier_meets_its_budget():
    """Analytic Gaussian calibration: δ(ε) at the returned multiplier is within budget, 0.1 % less noise
    is not, it beats the classical √(2 ln(1.25/δ))/ε bound and the RDP-calibrated multiplier, and
    δ(ε) agrees with a direct evaluation of the privacy-loss tail (Balle & Wang 2018, Thm 8)."""
    from dpaudit.accounting import GaussianMechanism, calibrate_noise

    for eps, delta in ((0.04, 1e-6), (0.005, 1e-7), (1.0, 1e-5)):
        z = amp_noise_multiplier(eps, delta)
        assert gaussian_delta(z, eps) <= delta < gaussian_delta(0.999 * z, eps)
        assert z <= math.sqrt(2 * math.log(1.25 / delta)) / eps
    assert amp_noise_multiplier(1.0, 1e-5) <= calibrate_noise(
        1.0, 1e-5, lambda s: GaussianMechanism(s, 1.0), accountant="rdp"
    )
    # the ledger's own exact-Gaussian analysis is the same curve: equal up to bisection tolerance
    assert amp_noise_multiplier(1.0, 1e-5) == pytest.approx(
        calibrate_noise(1.0, 1e-5, lambda s: GaussianMechanism(s, 1.0)), rel=1e-4
    )
    # δ(ε) = P[L > ε] − e^ε P[L' < −ε] with the privacy loss L ~ N(μ²/2, μ²), here by numerical integration
    z, eps = 3.0, 0.5
    mu = 1 / z
    grid = np.linspace(-12, 12, 400001)
    density = stats.norm.pdf(grid)
    x = grid  # output of N(0, 1) vs N(μ, 1): loss at x is μx − μ²/2 ... integrate (p − e^ε q)_+
    p_dens, q_dens = stats.norm.pdf(x, loc=mu), density
    direct = float(np.trapezoid(np.clip(p_dens - math.exp(eps) * q_dens, 0, None), x))
    assert gaussian_delta(z, eps) == pytest.approx(direct, rel=1e-4)
    with pytest.raises(DPAuditError):
        amp_noise_multiplier(0.0, 1e-5)


# ------------------------------------------------------------------------------ the defense


def test_gcon_fit_spec_card_and_reproducibility(small_graph, tmp_path):
    split = make_split(small_graph, "random:0.5,0.2,0.3", seed=0)
    defense = get_defense("gcon")
    model = defense(epsilon=1.0, seed=0, encoder_epochs=50).fit(small_graph, split)
    spec = model.privacy
    assert spec.unit == "edge" and spec.sound and spec.epsilon <= 1.0
    assert spec.delta < 1 / small_graph.num_edges
    recorded = spec.mechanisms[0]
    assert recorded["name"] == "gcon objective perturbation (Theorem 1)"
    for key in ("psi", "lambda_prime", "beta", "omega", "c_theta", "epsilon_lambda", "c_sf"):
        assert key in recorded["details"]
    assert recorded["details"]["psi"] == pytest.approx(1.12)
    gcon = model.card["gcon"]
    assert "solver" not in gcon and model.record["gcon"]["warm_start"]["converged"]
    assert gcon["schedule"]["steps"] >= 1 and gcon["schedule"]["residual_bound"] <= 1e-8
    # half the nodes are training nodes: labels are not scarce, so sound's rows are those (n₁ = n₀)
    assert gcon["n1"] == len(split.train) == small_graph.num_nodes // 2
    assert model.card["inference"]["private"] is False
    acc = model.accuracy(small_graph.data, split.test)
    assert acc > 1.5 / small_graph.num_classes
    again = defense(epsilon=1.0, seed=0, encoder_epochs=50).fit(small_graph, split)
    assert torch.equal(again.theta, model.theta)
    other = defense(epsilon=1.0, seed=1, encoder_epochs=50).fit(small_graph, split)
    assert not torch.equal(other.theta, model.theta)
    # ε = ∞ runs the same pipeline without noise and says so
    plain = defense(seed=0, encoder_epochs=50).fit(small_graph, split)
    assert not plain.privacy.is_private and "theorem1" not in plain.card["gcon"]
    # a tiny ε raises Λ by Eq. (22) and still meets its target (fixed α: a 5-epoch encoder's
    # pseudo-labels would make the homophily rule switch propagation off, Ψ = 0)
    tight = defense(epsilon=0.01, seed=0, encoder_epochs=5, pseudo_labels=False, regularization=0.01, adapt="none").fit(
        small_graph, split
    )
    details = tight.privacy.mechanisms[0]["details"]
    assert details["regularization"] > details["regularization_requested"]
    assert tight.privacy.epsilon <= 0.01 * (1 + 1e-9)


def test_gcon_amp_noise_is_added_and_accounted(small_graph):
    """The released Θ carries AMP's Gaussian with the recorded σ, the ledger lists it beside Theorem 1,
    Theorem 1 gets (1 − s) of the budget, and the composed ε stays ≤ the target."""
    split = make_split(small_graph, "random:0.5,0.2,0.3", seed=0)
    # the homophily statistic off: Theorem 1 and AMP alone (the statistic: test_gcon_homophily.py)
    kwargs = dict(epsilon=2.0, seed=0, encoder_epochs=20, encoder_hidden=16, amp_share=0.05, adapt="none")
    model = GCON(**kwargs).fit(small_graph, split)
    spec = model.privacy
    assert spec.sound and spec.protocol == "sound" and not spec.unaccounted
    assert spec.epsilon <= 2.0 and spec.target_epsilon == 2.0
    theorem1, amp = spec.mechanisms
    assert theorem1["name"].startswith("gcon objective perturbation") and amp["name"].startswith("gcon AMP")
    assert theorem1["epsilon"] <= 0.95 * 2.0 and theorem1["delta"] <= 0.95 * spec.delta
    assert amp["epsilon"] == pytest.approx(0.1) and amp["delta"] <= 0.05 * spec.delta
    assert spec.epsilon == pytest.approx(theorem1["epsilon"] + amp["epsilon"])
    details = amp["details"]
    t1 = theorem1["details"]
    c = small_graph.num_classes
    assert details["strong_convexity"] == model.card["gcon"]["regularization_total"]
    assert details["smoothness"] == pytest.approx(t1["regularization"] + t1["lambda_prime"] + t1["c2"])  # s = 1
    assert details["diameter"] == pytest.approx(2 * math.sqrt(c) * t1["c_theta"])
    assert details["residual_bound"] == pytest.approx(details["diameter"] * details["contraction"] ** details["steps"])
    assert details["residual_bound"] <= 1e-8 < details["residual_bound"] / details["contraction"]  # fewest steps
    assert details["sensitivity"] == pytest.approx(2 * details["residual_bound"])
    assert details["sigma"] == pytest.approx(amp_noise_multiplier(0.1, 0.05 * spec.delta) * details["sensitivity"])
    # and the same fit without noise (ε = ∞) has no AMP entry at all
    plain = GCON(**{**kwargs, "epsilon": math.inf}).fit(small_graph, split)
    assert "amp" not in plain.card["gcon"] and not plain.privacy.mechanisms


def test_gcon_capped_schedule_still_releases_with_larger_noise(small_graph, tmp_path):
    """A tolerance no solver reaches (1e-300), one warm-start iteration per L-BFGS run and a cap of
    two descent steps: the fit releases (no convergence check, no refusal); its noise is the bound
    of two steps, ρ^(T−2) times the full schedule's, and dominates Θ. That the warm start missed
    its tolerance is in the owner's record only."""
    split = make_split(small_graph, "random:0.5,0.2,0.3", seed=0)
    kwargs = dict(epsilon=2.0, seed=0, encoder_epochs=20, encoder_hidden=16)
    full = GCON(**kwargs).fit(small_graph, split)
    capped = GCON(**kwargs, residual_tol=1e-300, max_iter=1, descent_steps=2).fit(small_graph, split)
    assert not capped.record["gcon"]["warm_start"]["converged"]
    assert "converged" not in json.dumps(capped.card)
    full_amp, capped_amp = full.privacy.mechanisms[1]["details"], capped.privacy.mechanisms[1]["details"]
    assert capped_amp["steps"] == 2 < full_amp["steps"]
    assert capped_amp["contraction"] == full_amp["contraction"] and capped_amp["diameter"] == full_amp["diameter"]
    assert capped_amp["sigma"] / full_amp["sigma"] == pytest.approx(
        capped_amp["contraction"] ** (2 - full_amp["steps"]), rel=1e-9
    )
    assert capped.privacy.epsilon <= 2.0 and capped.privacy.sound
    sigma = capped_amp["sigma"]
    assert sigma > 50 * np.abs(full.theta.numpy()).max()
    assert capped.theta.numpy().std() == pytest.approx(sigma, rel=0.35)
    assert dpaudit.release.model.load(capped.save(tmp_path / "capped")).verification.status == "recomputed"


def test_gcon_release_is_neutral_to_one_edge(small_graph, tmp_path):
    """Same seed on G and on G minus one edge between training nodes: model.json agrees leaf by leaf
    (the card's plan, the spec and its notes hold nothing measured on the edges) except the output
    of the accounted homophily statistic (ĥ, a Laplace release, and the α_I the public rule
    computes from it); the warm start's diagnostics, which do differ, sit in the owner's record."""
    split = make_split(small_graph, "random:0.75,0.1,0.15", seed=0)
    neighbour = without_edge(small_graph, split)
    assert neighbour.num_edges == small_graph.num_edges - 1

    def make():
        return GCON(epsilon=4.0, seed=0, encoder_epochs=20)

    differences = train_and_compare(make, (small_graph, split), (neighbour, split), tmp_path)
    assert set(differences) <= set(GCON.released_statistics)
    records = [json.loads((tmp_path / f"neighbour-{i}" / "provenance.json").read_text())["gcon"] for i in (0, 1)]
    assert records[0]["warm_start"]["objective"] != records[1]["warm_start"]["objective"]
    public = (tmp_path / "neighbour-0" / "model.json").read_text()
    assert not any(key in public for key in ('"grad_norm"', '"objective"', '"iterations"', '"converged"', "‖∇"))


def test_gcon_replan_matches_fit_and_refuses_partial_edits(small_graph, tmp_path):
    """GCON.replan re-derives the spec's records from the card's public inputs through the plan
    function fit used; edits the spec's own arithmetic cannot see are refused on load."""
    split = make_split(small_graph, "random:0.5,0.2,0.3", seed=0)
    model = GCON(epsilon=2.0, seed=0, encoder_epochs=5).fit(small_graph, split)
    directory = model.save(tmp_path / "m")
    loaded = dpaudit.release.model.load(directory, record=False)
    assert compare_records(loaded.privacy.mechanisms, GCON.replan(loaded.card, loaded.privacy)) is None
    assert any("re-derived" in line for line in loaded.verification.checked)

    def edited(name, edit):
        return edited_copy(directory, tmp_path / name, edit)

    # a public input the records do not name: the plan changes, the records do not
    def regularization(meta):
        meta["card"]["hyperparameters"]["regularization"] = 0.5

    with pytest.raises(IntegrityError, match="plan"):
        dpaudit.release.model.load(edited("reg", regularization))

    # a whole spec planned for n₁ − 1 rows is self-consistent, but the card says n₁
    def fewer_rows(meta):
        hp = GCON(epsilon=2.0, encoder_epochs=5).hp
        config = default_config(hp, {"alpha": hp.alpha, "steps": [2.0], "alpha_inference": hp.alpha})
        n1 = meta["card"]["gcon"]["n1"] - 1
        h = hp.homophily_share  # Theorem 1 and AMP at (1 − h)ε, the homophily statistic at hε
        plan = plan_configuration(
            (1 - h) * 2.0, meta["privacy"]["delta"], small_graph.num_classes, hp.encoder_hidden, n1, config, hp
        )
        mechanisms = [*plan.mechanisms(), homophily_mechanism(h * 2.0)]
        records = [json.loads(json.dumps(m.describe())) for m in mechanisms]
        meta["privacy"]["mechanisms"] = records
        meta["privacy"]["epsilon"] = sum(r["epsilon"] for r in records)

    with pytest.raises(IntegrityError, match="plan"):
        dpaudit.release.model.load(edited("rows", fewer_rows))

    # the cap on T alone: AMP's schedule is re-derived from the card before the plan is
    def fewer_steps(meta):
        meta["card"]["hyperparameters"]["descent_steps"] = 2

    with pytest.raises(IntegrityError, match="AMP"):
        dpaudit.release.model.load(edited("steps", fewer_steps))


def test_gcon_paper_protocol_selects_on_validation_and_says_so(small_graph, tmp_path):
    split = make_split(small_graph, "random:0.5,0.2,0.3", seed=0)
    grid = "alpha=0.2,0.8; steps=1,0; loss=msl,huber:0.5; alpha_inference=alpha,0.9"
    model = GCON(epsilon=1.0, seed=0, encoder_epochs=20, protocol="paper", grid=grid).fit(small_graph, split)
    spec = model.privacy
    assert spec.protocol == "paper" and spec.sound is False and spec.epsilon <= 1.0
    assert len(spec.unaccounted) == 1 and "16 configurations" in spec.unaccounted[0]
    assert "validation" in spec.unaccounted[0] and "not accounted" in spec.unaccounted[0]
    selection = model.card["gcon"]["selection"]
    assert selection["candidates"] == 16 and selection["grid"] == grid
    # the validation accuracy that chose it is the owner's (read through the private edges)
    assert "val_accuracy" not in selection
    val_accuracy = model.record["gcon"]["selection"]["val_accuracy"]
    # the released model is the chosen configuration, and its validation accuracy is the recorded one
    chosen = selection["chosen"]
    assert model.settings["alpha"] == chosen["alpha"] and model.settings["alpha_inference"] == chosen["alpha_inference"]
    assert model.settings["steps"] == chosen["steps"] and model.settings["loss"] == chosen["loss"]
    assert model.accuracy(small_graph.data, split.val) == pytest.approx(val_accuracy)
    # saved, the card passes the public-card check and the plan of the chosen configuration is re-derived
    loaded = dpaudit.release.model.load(model.save(tmp_path / "paper"), record=False)
    assert compare_records(loaded.privacy.mechanisms, GCON.replan(loaded.card, loaded.privacy)) is None
    # the best of the grid is at least as good on validation as any single candidate trained alone
    single = GCON(epsilon=1.0, seed=0, encoder_epochs=20, protocol="paper", grid="alpha=0.8; steps=0").fit(
        small_graph, split
    )
    assert val_accuracy >= single.record["gcon"]["selection"]["val_accuracy"] - 1e-12
    # the same seed gives the same selection; the sound protocol never selects
    again = GCON(epsilon=1.0, seed=0, encoder_epochs=20, protocol="paper", grid=grid).fit(small_graph, split)
    assert torch.equal(again.theta, model.theta)
    sound = GCON(epsilon=1.0, seed=0, encoder_epochs=20, grid=grid).fit(small_graph, split)
    assert sound.privacy.sound and "selection" not in sound.card["gcon"] and "selection" not in sound.record["gcon"]
    assert sound.card["gcon"]["config"]["alpha"] == 0.6


def test_paper_grid_parsing():
    grid = parse_grid(PAPER_GRID)
    assert grid["encoder_hidden"] == [8, 16, 64] and grid["regularization"] == [0.01, 0.2, 1.0, 2.0]
    assert grid["loss"] == [("msl", None), ("huber", 0.1), ("huber", 0.2), ("huber", 0.5)]
    assert grid["steps"] == ["1", "2", "5", "10", "inf"] and grid["alpha_inference"] == [None, 0.1, 0.9]
    hp = GCON(epsilon=1.0, protocol="paper").hp
    configs = grid_configs(hp, {"grid": grid, "alpha": 0.6, "steps": [2.0], "alpha_inference": 0.6})
    assert len(configs) == 3 * 4 * 5 * 2 * 4 * 4 * 3
    assert parse_grid("steps=1+5,inf")["steps"] == ["1,5", "inf"]


def test_gcon_save_load_round_trip(small_graph, tmp_path):
    split = make_split(small_graph, "random:0.5,0.2,0.3", seed=0)
    model = get_defense("gcon")(epsilon=2.0, seed=0, encoder_epochs=20, steps="1,inf").fit(small_graph, split)
    loaded = dpaudit.release.model.load(model.save(tmp_path / "m"))
    assert loaded.kind == "gcon" and loaded.privacy.to_dict() == model.privacy.to_dict()
    assert torch.allclose(loaded.predict_proba(small_graph.data), model.predict_proba(small_graph.data))
    assert torch.allclose(loaded.embed(small_graph.data, [0, 5]), model.embed(small_graph.data, [0, 5]))
    assert loaded.embed(small_graph.data, [0]).shape == (1, 2 * 16)  # s = 2 steps × d₁ = 16
    # a config that does not fit the tensors is refused
    from defenses.gcon import GCONModel

    config = {**model.config(), "num_classes": small_graph.num_classes + 1}
    with pytest.raises(ModelFormatError):
        GCONModel.from_state(config, model.state_tensors(), model.privacy, model.card)
    public = GCONModel.from_state({**model.config(), "inference": "public"}, model.state_tensors(), model.privacy, {})
    assert public.predict_proba(small_graph.data, [1, 2]).shape == (2, small_graph.num_classes)


@pytest.mark.parametrize(
    "overrides",
    [
        {"alpha": 0.0},
        {"alpha": 1.5},
        {"steps": "-1"},
        {"steps": "two"},
        {"steps": ""},
        {"omega": 1.0},
        {"loss": "cross-entropy"},
        {"loss": "huber", "huber_delta": 0.0},
        {"regularization": 0.0},
        {"xi": -1.0},
        {"inference": "oracle"},
        {"encoder_hidden": 0},
        {"alpha_inference": 2.0},
        {"no_such_hyperparameter": 1},
        {"residual_tol": 0.0},
        {"descent_steps": -1},
        {"max_iter": 0},
        {"amp_share": 0.0},
        {"amp_share": 1.0},
        {"protocol": "best"},
        {"protocol": "paper", "grid": "alpha=2"},
        {"protocol": "paper", "grid": "beta=1"},
        {"protocol": "paper", "grid": "loss=huber"},
        {"protocol": "paper", "grid": "alpha=0.2; alpha=0.4"},
        {"protocol": "paper", "grid": "pseudo_labels=maybe"},
    ],
)
def test_bad_hyperparameters_raise_configuration_errors(overrides):
    with pytest.raises(ConfigurationError):
        GCON(epsilon=1.0, **overrides)


def test_bad_privacy_parameters_and_steps_parsing():
    with pytest.raises(DPAuditError):
        GCON(epsilon=-1.0)
    with pytest.raises(DPAuditError):
        GCON(epsilon=1.0, delta=2.0)
    assert parse_steps("1, 5,inf") == [1.0, 5.0, math.inf]
    with pytest.raises(ConfigurationError):
        parse_steps("2.5")
