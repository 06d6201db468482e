"""Multi-objective search of a large design space with optuna (NSGA-II or TPE), ask/tell in
fixed-size batches so the sequence of points depends only on the seed. Points already in the
study are told to the sampler first (resume) and never recomputed.
"""

from __future__ import annotations

from typing import Any

from tessel.analysis.explore_store import PointResult
from tessel.errors import TesselConfigError

_MAX_ASK_FACTOR = 20  # stop after trials x this many asks (the sampler keeps repeating points)


def optuna_search(driver: Any, method: str, trials: int, seed: int, batch: int) -> None:
    try:
        import optuna
    except ImportError as exc:
        raise TesselConfigError(f"--search {method} needs the 'optuna' package ({exc})") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space, agg, cons = driver.space, driver.space.latency, driver.space.constraints
    dists = {k: optuna.distributions.CategoricalDistribution(list(v)) for k, v in space.params}

    sampler = (optuna.samplers.NSGAIISampler(seed=seed, population_size=max(batch, 8))
               if method == "nsga2" else
               optuna.samplers.TPESampler(seed=seed, multivariate=True))
    study = optuna.create_study(directions=["minimize"] * 3, sampler=sampler)
    seen: set[str] = set()
    for res in sorted(driver.study.points.values(), key=lambda r: r.key):
        if driver.owns(res) and _in_space(res, dists):
            study.add_trial(_frozen(optuna, res, dists, agg, cons))
            seen.add(res.key)
    asks = 0
    while len(seen) < min(trials, space.size) and asks < _MAX_ASK_FACTOR * trials:
        n = min(batch, trials - len(seen))
        asked = [study.ask(dists) for _ in range(n)]
        asks += n
        points = [dict(sorted(t.params.items())) for t in asked]
        driver.run(points)
        for t, p in zip(asked, points, strict=True):
            res = driver.known(p)
            seen.add(res.key)
            _tell(study, t, res, agg, cons)


def _in_space(res: PointResult, dists: dict) -> bool:
    return set(res.params) == set(dists) and all(res.params[k] in d.choices
                                                 for k, d in dists.items())


def _values(res: PointResult, agg: Any) -> list[float]:
    return [res.latency_ms(agg), res.energy_uj, res.area_mm2]


def _violation(res: PointResult, agg: Any, cons: Any) -> float:
    """Constraints broken (optuna: feasible iff <= 0; set_constraint needs optuna >= 5)."""
    return float(len(res.violations(cons, agg)))


def _tell(study: Any, trial: Any, res: PointResult, agg: Any, cons: Any) -> None:
    import optuna

    if not res.feasible:
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
        return
    trial.set_constraint("violations", _violation(res, agg, cons))
    study.tell(trial, _values(res, agg))


def _frozen(optuna: Any, res: PointResult, dists: dict, agg: Any, cons: Any) -> Any:
    params = {k: res.params[k] for k in dists}
    if not res.feasible:
        return optuna.trial.create_trial(params=params, distributions=dists,
                                         state=optuna.trial.TrialState.FAIL)
    return optuna.trial.create_trial(params=params, distributions=dists,
                                     values=_values(res, agg),
                                     constraints={"violations": _violation(res, agg, cons)})
