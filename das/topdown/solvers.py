"""The solver adapters: a least-squares pass to Clarabel directly (das.topdown.l2) or stated in cvxpy (the reference
path, any cvxpy QP solver), and HiGHS for every LP and MIP of das, built with no banner on stdout."""

from __future__ import annotations

import os
import sys
import warnings

import highspy
import numpy as np
import scipy.sparse as sp

from das.topdown import l2
from das.topdown.matrices import scale_of

SOLVERS = ("CLARABEL", "cvxpy:<a cvxpy QP solver>, e.g. cvxpy:CLARABEL or cvxpy:OSQP")
DEFAULT_SOLVER = "CLARABEL"  # the nested QP straight to Clarabel (das.topdown.l2)


def check_solver(solver: str) -> str:
    """The solver name as used: `CLARABEL` (direct, nested formulation) or `cvxpy:NAME` (the reference path)."""
    if solver.upper() == "CLARABEL":
        return "CLARABEL"
    if solver.startswith("cvxpy:") and solver[len("cvxpy:"):]:
        import cvxpy as cp

        name = solver[len("cvxpy:"):].upper()
        if name not in cp.installed_solvers():
            raise ValueError(f"solver {solver!r}: cvxpy has no installed solver {name!r} "
                             f"(installed: {', '.join(cp.installed_solvers())})")
        return f"cvxpy:{name}"
    raise ValueError(f"unknown least-squares solver {solver!r}: expected {' or '.join(SOLVERS)}")


def least_squares(columns, stated: l2.Pass, solver: str, *, tight: bool = False) -> l2.Point | None:
    """One weighted least-squares pass; returns the solution (x in counts, and the direct path's answer
    variables) or None when infeasible.

    Variables are x / scale (feasibility tolerances relative to the counts) but the residuals are
    in counts, weighted 1/sd: the objective is the statistical one, not shrunk by scale^2 below the
    solver's absolute gap tolerance (which stopped Clarabel at an interior point, spreading mass
    over truly empty cells of a state). `CLARABEL` builds the nested QP directly (das.topdown.l2);
    `cvxpy:NAME` states the same problem in cvxpy, the reference (no answer variables: None).
    """
    scale = scale_of([y for _, y, _ in stated.terms], stated.parent)
    if solver == "CLARABEL":
        try:
            point = l2.solve_point(stated, len(columns), scale, tight)
            if point is not None or not stated.fixed:
                return point
            # "infeasible" with held answers is numerical: the previous pass's solution satisfies them
            # (their equalities repeat the total invariant at a root, Perry County AL seed 11)
        except l2.Stalled:
            pass  # no proof either way (seen on the DHC schema's large roots)
        solver = "cvxpy:CLARABEL"  # the cvxpy path decides
    x = least_squares_cvxpy(columns, stated, solver[len("cvxpy:"):], tight=tight, scale=scale)
    return None if x is None else l2.Point(x, None)


def least_squares_cvxpy(columns, stated: l2.Pass, solver: str, *, tight: bool, scale: float):
    """The reference: the pass stated with cvxpy atoms and solved by any cvxpy QP solver."""
    import cvxpy as cp

    terms, fixed, parent, bounds, slack_budget = (stated.terms, stated.fixed, stated.parent, stated.bounds,
                                                  stated.slack_budget)
    n_var = len(columns)
    z = cp.Variable(n_var, nonneg=True)  # x = scale * z
    residuals = [cp.sum_squares((np.sqrt(w) * scale) * (a @ z) - np.sqrt(w) * y) for a, y, w in terms]
    objective_expr = cp.Minimize(cp.sum(residuals) if residuals else 0)
    constraints = []
    if parent is not None:
        s_matrix, counts = parent
        if slack_budget is None:
            constraints.append(s_matrix @ z == counts / scale)
        else:
            slack = cp.Variable(len(counts))
            constraints += [s_matrix @ z - counts / scale == slack, cp.norm1(slack) <= slack_budget / scale]
    b_matrix, lower, upper = bounds
    if b_matrix is not None:
        lo = lower > 0
        hi = np.isfinite(upper)
        if lo.any():
            constraints.append(b_matrix[lo] @ z >= lower[lo] / scale)
        if hi.any():
            constraints.append(b_matrix[hi] @ z <= upper[hi] / scale)
    for matrix, target in fixed:
        constraints.append(matrix @ z == target / scale)
    prob = cp.Problem(objective_expr, constraints)
    with warnings.catch_warnings():
        # "optimal_inaccurate" is accepted here: the certificate (duality gap) decides afterwards
        warnings.simplefilter("ignore", UserWarning)
        try:
            if tight:
                prob.solve(solver="CLARABEL", **l2.TIGHT_SETTINGS)
            else:
                prob.solve(solver=solver)
        except cp.error.SolverError:
            pass
        if prob.status not in ("optimal", "optimal_inaccurate") and (solver != "CLARABEL" or tight):
            # a solver that stopped short (iteration limit) is not proof of infeasibility: ask
            # Clarabel at its defaults before the failsafe is considered
            try:
                prob.solve(solver="CLARABEL")
            except cp.error.SolverError:  # failed at its defaults too (seen at gap 1e-12 on Delaware)
                return None
    if prob.status not in ("optimal", "optimal_inaccurate"):
        return None
    return np.clip(np.asarray(z.value, dtype=float) * scale, 0, None)


_banner_shown = []  # HiGHS prints its banner to the process's stdout once, from the first Highs()


def quiet_highs() -> highspy.Highs:
    """A Highs with no output; the first one of the process is built with stdout closed, so its banner
    does not land in a command's output (the run summary, the attack's report): every HiGHS model of das is built here."""
    if _banner_shown:
        h = highspy.Highs()
    else:
        sys.stdout.flush()
        saved, devnull = os.dup(1), os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, 1)
            h = highspy.Highs()
        finally:
            os.dup2(saved, 1)
            os.close(saved)
            os.close(devnull)
        _banner_shown.append(True)
    h.setOptionValue("output_flag", False)
    return h


def highs_lp(cost, a_matrix: sp.csr_matrix, row_lower, row_upper, *, col_upper, integer: bool,
              presolve: bool = True):
    """min cost'x over lower <= A x <= upper, 0 <= x <= col_upper (integer: a MIP); x, or None when not optimal."""
    h = quiet_highs()
    h.setOptionValue("threads", 1)
    if not presolve:
        h.setOptionValue("presolve", "off")
    n = len(cost)
    lp = highspy.HighsLp()
    lp.num_col_ = n
    lp.num_row_ = a_matrix.shape[0]
    lp.col_cost_ = np.asarray(cost, dtype=float)
    lp.col_lower_ = np.zeros(n)
    lp.col_upper_ = np.asarray(col_upper, dtype=float)
    lp.row_lower_ = np.asarray(row_lower, dtype=float)
    lp.row_upper_ = np.asarray(row_upper, dtype=float)
    csc = a_matrix.tocsc()
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = csc.indptr.astype(np.int32)
    lp.a_matrix_.index_ = csc.indices.astype(np.int32)
    lp.a_matrix_.value_ = csc.data.astype(float)
    if integer:
        lp.integrality_ = [highspy.HighsVarType.kInteger] * n
    h.passModel(lp)
    h.run()
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return None
    return np.asarray(h.getSolution().col_value, dtype=float)
