//! Line plots as SVG (plotters' SVG backend: no system font or image library
//! needed): time against nodes on log–log axes, one line per series.

use std::path::Path;

use anyhow::{anyhow, Result};
use plotters::prelude::*;

/// One line of a plot.
#[derive(Clone, Debug)]
pub struct Series {
    /// Legend text.
    pub label: String,
    /// (nodes, µs) points in order.
    pub points: Vec<(f64, f64)>,
    /// Dashed (predictions) instead of solid (measurements).
    pub dashed: bool,
    /// Colour index: series with the same index share a colour.
    pub color: usize,
}

/// Draws `series` into an SVG at `path`, x (nodes) and y (µs) both logarithmic.
pub fn nodes_vs_time(path: &Path, title: &str, series: &[Series]) -> Result<()> {
    let e = |e: &dyn std::fmt::Display| anyhow!("plotting {}: {e}", path.display());
    let xs = series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let (x_min, x_max) = xs.fold((f64::INFINITY, 1.0f64), |(lo, hi), x| (lo.min(x), hi.max(x)));
    let ys = series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
    let (y_min, y_max) = ys.fold((f64::INFINITY, 1.0f64), |(lo, hi), y| (lo.min(y), hi.max(y)));
    let x_range = (x_min.min(x_max / 2.0).max(1.0))..(x_max * 1.05);
    let y_range = (y_min.min(y_max / 2.0) * 0.7).max(0.1)..(y_max * 1.5);
    let root = SVGBackend::new(path, (1000, 650)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(x_range.log_scale(), y_range.log_scale())
        .map_err(|x| e(&x))?;
    chart
        .configure_mesh()
        .x_desc("nodes")
        .y_desc("µs per barrier")
        .x_label_formatter(&|x| format!("{}", x.round() as u64))
        .draw()
        .map_err(|x| e(&x))?;
    for s in series {
        let color = Palette99::pick(s.color).to_rgba();
        let style = color.stroke_width(2);
        let points = s.points.clone();
        let drawn = if s.dashed {
            chart.draw_series(DashedLineSeries::new(points, 8, 5, style)).map_err(|x| e(&x))?
        } else {
            chart.draw_series(LineSeries::new(points, style)).map_err(|x| e(&x))?
        };
        drawn.label(s.label.clone()).legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|x| e(&x))?;
    root.present().map_err(|x| e(&x))?;
    Ok(())
}
