"""The evaluation ring: harnesses that measure the library on labelled data.

Nothing in the library imports this package (``tests/test_architecture.py`` checks it):

* :mod:`~stragglers.evaluation.verdict_eval` - the verdict against injected causes in the
  example job (``stragglers probe verdict-eval``);
* :mod:`~stragglers.evaluation.recipe_eval` - the verdict on runs of the documented DDP loop,
  Lightning and Hugging Face recipes, healthy or with rank 1 slowed (``stragglers probe
  recipe-eval``);
* :mod:`~stragglers.evaluation.fidelity` - the probe's fidelity table (``stragglers probe
  fidelity``);
* :mod:`~stragglers.evaluation.corpus` / :mod:`~stragglers.evaluation.detect_eval` - the labelled
  synthetic detection corpus and the Falcon Table 4/5 style benchmark (``stragglers detect-eval``);
* :mod:`~stragglers.evaluation.jobcorpus` / :mod:`~stragglers.evaluation.detect_eval_jobs` - the
  second, job-shaped corpus and its leave-one-family-out evaluation;
* :mod:`~stragglers.evaluation.realdata` - the labelled real iteration logs of ``../shared/real``.
"""
