"""One handler per work-queue kind (:mod:`queue_bridge.kinds`): re-read the caches for the key,
decide with the pure modules, write through :mod:`queue_bridge.acting`.

Each module exposes ``async def reconcile(ctx, namespace, name)``; :class:`.context.Context`
carries what they share (the API, the caches, the clock, metrics, Events, requeue).
"""
