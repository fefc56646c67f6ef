"""Log readers and followers: the records of a job's logs, typed, with file/line/field errors.

* :mod:`~stragglers.logs.records` - the JSON-lines record schema (call, iteration, step,
  message) and its parser;
* :mod:`~stragglers.logs.megatron` - Megatron-LM / NeMo text logs and iteration-time JSON;
* :mod:`~stragglers.logs.follow` - following growing files like ``tail -F`` through truncation
  and rotation, and its notices about the files;
* :mod:`~stragglers.logs.watch_dir` - which files of a folder or glob pattern can be read.

The readers know nothing of what is done with the records: they import neither detection
(:mod:`stragglers.detect`) nor hang localisation (:mod:`stragglers.hang`), which import them.
"""
