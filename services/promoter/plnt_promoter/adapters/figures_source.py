"""Opens the ``FiguresSource`` the promoter's settings choose (``PLNT_PROMOTER_FIGURES``)."""

from nats.aio.client import Client

from plnt_promoter.adapters.figures_bus import BusFigures
from plnt_promoter.adapters.figures_prometheus import PrometheusFigures
from plnt_promoter.settings import PromoterSettings


async def open_figures(*, settings: PromoterSettings, nc: Client) -> BusFigures | PrometheusFigures:
    """The bus source (started) or the Prometheus one; ``close()`` it when done."""
    if settings.figures == "prometheus":
        return PrometheusFigures(url=settings.prometheus_url)
    figures = BusFigures(nc=nc)
    await figures.start()
    return figures
