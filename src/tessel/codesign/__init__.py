"""tessel.codesign: NPU choices for a scenario (several models at their rates on one NPU):
the operating point a DVFS policy picks (``tessel.codesign.dvfs``) and the design of lowest
average power that meets every deadline (``tessel.codesign.explore``, `tessel explore
--scenario`). Built on the scenario scheduler (tessel.scenario) and the design-space tools
(tessel.analysis)."""
