"""Running a worker: the trio driver and its loops, response handling, metrics, feeding a crawl."""
