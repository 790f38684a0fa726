"""Jobs: long work on the task queue, watched and stopped by a lead."""
