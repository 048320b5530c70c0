"""The runtime: a loaded model version (``Model``), its instances' worker threads, warm-up,
request validation and the classification extension."""
