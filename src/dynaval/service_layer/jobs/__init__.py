"""Jobs: long work on the task queue (training, for a start), with its progress, result and cancel."""
