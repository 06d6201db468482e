"""Scenarios: several models on one NPU, each at its rate, with deadlines and dependencies."""

from tessel.scenario.spec import Scenario, ScenarioModel, load_scenario, parse_scenario, shipped

__all__ = ["Scenario", "ScenarioModel", "load_scenario", "parse_scenario", "shipped"]
