//! SVG charts with plotters: throughput and latency percentiles per
//! configuration, and throughput and p99 against concurrency.

use std::path::Path;

use plotters::coord::Shift;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use super::{ExperimentResult, Results};

pub struct Chart {
    pub experiment: &'static str,
    pub title: String,
    /// File name relative to the report.
    pub file: String,
}

fn err(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("chart: {e}")
}

pub fn write_all(results: &Results, out: &Path) -> anyhow::Result<Vec<Chart>> {
    let mut charts = Vec::new();
    for e in &results.experiments {
        if e.summary.is_empty() {
            continue;
        }
        if e.experiment.id == "concurrency" {
            charts.push(concurrency(e, out)?);
        } else {
            charts.push(throughput(e, out)?);
            charts.push(latency(e, out)?);
        }
    }
    Ok(charts)
}

type Canvas<'a> = DrawingArea<SVGBackend<'a>, Shift>;

/// Draws one chart of experiment `e` on a white SVG canvas of `size`
/// pixels, written to `out/file`.
fn svg(
    e: &ExperimentResult,
    out: &Path,
    file: String,
    title: String,
    size: (u32, u32),
    draw: impl FnOnce(&Canvas<'_>, &str) -> anyhow::Result<()>,
) -> anyhow::Result<Chart> {
    let path = out.join(&file);
    let root = SVGBackend::new(&path, size).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    draw(&root, &title)?;
    root.present().map_err(err)?;
    Ok(Chart {
        experiment: e.experiment.id,
        title,
        file,
    })
}

/// The legend box, in the same style on every chart.
fn legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
    position: SeriesLabelPosition,
) -> anyhow::Result<()> {
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .position(position)
        .draw()
        .map_err(err)
}

type BarChart<'a, 'b, X> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<X, RangedCoordf64>>;

/// A horizontal bar chart's frame: the caption, an x axis over `x`, one
/// labelled row per entry of `labels`, and the mesh.
fn bar_frame<'a, 'b, R>(
    root: &'a Canvas<'b>,
    title: &str,
    x: R,
    labels: &[String],
    x_desc: &str,
) -> anyhow::Result<BarChart<'a, 'b, R::CoordDescType>>
where
    R: AsRangedCoord<Value = f64>,
    R::CoordDescType: ValueFormatter<f64>,
{
    let n = labels.len();
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(320)
        .build_cartesian_2d(x, -0.5..(n as f64 - 0.5))
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(n)
        .y_label_formatter(&|y| category(labels, *y))
        .x_desc(x_desc)
        .draw()
        .map_err(err)?;
    Ok(chart)
}

/// The label of the bar at `y` on a category axis: bars sit at whole
/// numbers, and the ticks in between stay blank.
fn category(labels: &[String], y: f64) -> String {
    let i = y.round();
    if (y - i).abs() < 0.01 && i >= 0.0 {
        labels.get(i as usize).cloned().unwrap_or_default()
    } else {
        String::new()
    }
}

fn label(e: &ExperimentResult, config: &str, workload: &str) -> String {
    if e.experiment.workloads.len() == 1 {
        config.to_owned()
    } else {
        format!("{config} · {workload}")
    }
}

/// Horizontal bars, one per configuration and workload, with the min–max
/// over rounds as a whisker.
fn throughput(e: &ExperimentResult, out: &Path) -> anyhow::Result<Chart> {
    let file = format!("{}-throughput.svg", e.experiment.id);
    let title = format!(
        "{}: requests per second (median, min–max)",
        e.experiment.title
    );
    let rows: Vec<(String, f64, f64, f64)> = e
        .summary
        .iter()
        .map(|s| {
            (
                label(e, &s.config, &s.workload),
                s.requests_per_second.median,
                s.requests_per_second.min,
                s.requests_per_second.max,
            )
        })
        .collect();
    let n = rows.len();
    let labels: Vec<String> = rows.iter().map(|r| r.0.clone()).collect();
    let xmax = rows.iter().map(|r| r.3).fold(1.0, f64::max) * 1.15;
    let height = 120 + 36 * n as u32;
    svg(e, out, file, title, (960, height), |root, title| {
        let mut chart = bar_frame(root, title, 0.0..xmax, &labels, "requests/s")?;
        chart
            .draw_series(rows.iter().enumerate().map(|(i, r)| {
                let y = i as f64;
                Rectangle::new(
                    [(0.0, y - 0.35), (r.1, y + 0.35)],
                    Palette99::pick(i).mix(0.8).filled(),
                )
            }))
            .map_err(err)?;
        chart
            .draw_series(rows.iter().enumerate().map(|(i, r)| {
                let y = i as f64;
                PathElement::new(vec![(r.2, y), (r.3, y)], BLACK.stroke_width(2))
            }))
            .map_err(err)?;
        Ok(())
    })
}

/// p50, p99 and p99.9 per configuration and workload, log scale.
fn latency(e: &ExperimentResult, out: &Path) -> anyhow::Result<Chart> {
    let file = format!("{}-latency.svg", e.experiment.id);
    let title = format!(
        "{}: latency percentiles (ms, medians over rounds)",
        e.experiment.title
    );
    let rows: Vec<(String, [f64; 3])> = e
        .summary
        .iter()
        .map(|s| {
            (
                label(e, &s.config, &s.workload),
                [s.p50_ms, s.p99_ms, s.p999_ms],
            )
        })
        .collect();
    let n = rows.len();
    let labels: Vec<String> = rows.iter().map(|r| r.0.clone()).collect();
    let lo = rows
        .iter()
        .flat_map(|r| r.1)
        .filter(|v| *v > 0.0)
        .fold(f64::MAX, f64::min)
        .min(1.0)
        / 2.0;
    let hi = rows.iter().flat_map(|r| r.1).fold(1.0, f64::max) * 2.0;
    let height = 140 + 48 * n as u32;
    svg(e, out, file, title, (960, height), |root, title| {
        let mut chart = bar_frame(
            root,
            title,
            (lo.max(0.001)..hi).log_scale(),
            &labels,
            "milliseconds (log scale)",
        )?;
        for (k, (name, color)) in [("p50", BLUE), ("p99", RED), ("p99.9", BLACK)]
            .into_iter()
            .enumerate()
        {
            let offset = (k as f64 - 1.0) * 0.25;
            chart
                .draw_series(rows.iter().enumerate().map(move |(i, r)| {
                    let y = i as f64 + offset;
                    Rectangle::new(
                        [
                            (lo.max(0.001), y - 0.1),
                            (r.1[k].max(lo.max(0.001)), y + 0.1),
                        ],
                        color.mix(0.7).filled(),
                    )
                }))
                .map_err(err)?
                .label(name)
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.mix(0.7).filled())
                });
        }
        legend(&mut chart, SeriesLabelPosition::LowerRight)
    })
}

/// Throughput (left axis) and p99 (right axis) against connections.
fn concurrency(e: &ExperimentResult, out: &Path) -> anyhow::Result<Chart> {
    let file = format!("{}.svg", e.experiment.id);
    let title = "GET /link/{code}: throughput and p99 against connections".to_owned();
    let pts: Vec<(f64, f64, f64)> = e
        .summary
        .iter()
        .map(|s| (s.connections as f64, s.requests_per_second.median, s.p99_ms))
        .collect();
    let ymax = pts.iter().map(|p| p.1).fold(1.0, f64::max) * 1.15;
    let pmax = pts.iter().map(|p| p.2).fold(0.1, f64::max) * 1.15;
    let xmax = pts.iter().map(|p| p.0).fold(1.0, f64::max) * 1.5;
    svg(e, out, file, title, (960, 480), |root, title| {
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .right_y_label_area_size(70)
            .build_cartesian_2d((0.8..xmax).log_scale(), 0.0..ymax)
            .map_err(err)?
            .set_secondary_coord((0.8..xmax).log_scale(), 0.0..pmax);
        chart
            .configure_mesh()
            .x_desc("connections (log scale)")
            .y_desc("requests/s")
            .x_label_formatter(&|x| format!("{x:.0}"))
            .draw()
            .map_err(err)?;
        chart
            .configure_secondary_axes()
            .y_desc("p99 ms")
            .draw()
            .map_err(err)?;
        let line = |y: fn(&(f64, f64, f64)) -> f64, color: RGBColor| {
            LineSeries::new(pts.iter().map(move |p| (p.0, y(p))), color.stroke_width(2))
                .point_size(4)
        };
        let swatch = |color: RGBColor| {
            move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
        };
        chart
            .draw_series(line(|p| p.1, BLUE))
            .map_err(err)?
            .label("requests/s")
            .legend(swatch(BLUE));
        chart
            .draw_secondary_series(line(|p| p.2, RED))
            .map_err(err)?
            .label("p99 ms")
            .legend(swatch(RED));
        legend(&mut chart, SeriesLabelPosition::UpperLeft)
    })
}
