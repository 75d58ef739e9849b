"""The Kontinue admission webhook (mutating + validating), an aiohttp HTTPS server."""
