"""Rendered pages: the DevTools client, the browser's process and its seal, the tab pool,
the steps acted out, the paused requests and their pace, and the Renderer (a fetcher)."""
