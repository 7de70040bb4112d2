//! Line plots of time against nodes on log–log axes, one line per series, in
//! panels side by side (the paper's Figures 5–10: switch beside hub, one rail
//! beside two), written as SVG and PNG with plotters. Text is drawn with
//! DejaVu Sans read from the system (Debian `fonts-dejavu-core`), so no
//! fontconfig or FreeType is needed.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{anyhow, bail, Result};
use plotters::coord::Shift;
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

/// One chart of a figure.
#[derive(Clone, Debug)]
pub struct Panel {
    /// The chart's caption.
    pub title: String,
    /// Its lines.
    pub series: Vec<Series>,
}

/// Where the font is looked for.
const FONT_PATHS: [&str; 2] =
    ["/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", "/usr/share/fonts/TTF/DejaVuSans.ttf"];

fn register_font() -> Result<()> {
    static REGISTERED: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            let bytes = FONT_PATHS.iter().find_map(|p| std::fs::read(p).ok()).ok_or_else(|| {
                format!("no DejaVu Sans font for plot text (looked in {}): apt-get install fonts-dejavu-core", FONT_PATHS.join(", "))
            })?;
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).map_err(|_| "unreadable DejaVu Sans font".to_string())
        })
        .clone()
        .map_err(|e| anyhow!(e))
}

/// Draws `panels` side by side into `<stem>.svg` and `<stem>.png`, x (nodes)
/// and y (µs) both logarithmic. Returns the two paths.
pub fn nodes_vs_time(stem: &Path, title: &str, panels: &[Panel]) -> Result<[PathBuf; 2]> {
    if panels.is_empty() {
        bail!("nothing to plot into {}", stem.display());
    }
    register_font()?;
    let size = ((560 * panels.len() as u32 + 40).max(900), 620);
    let svg = stem.with_extension("svg");
    let png = stem.with_extension("png");
    draw(SVGBackend::new(&svg, size).into_drawing_area(), title, panels).map_err(|e| anyhow!("plotting {}: {e}", svg.display()))?;
    draw(BitMapBackend::new(&png, size).into_drawing_area(), title, panels).map_err(|e| anyhow!("plotting {}: {e}", png.display()))?;
    Ok([svg, png])
}

fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, title: &str, panels: &[Panel]) -> Result<(), String> {
    let e = |x: &dyn std::fmt::Display| x.to_string();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let root = root.titled(title, ("sans-serif", 20)).map_err(|x| e(&x))?;
    let areas = root.split_evenly((1, panels.len()));
    // One scale for all panels, so that they compare at a glance.
    let all = || panels.iter().flat_map(|p| p.series.iter().flat_map(|s| s.points.iter()));
    let (x_min, x_max) = all().fold((f64::INFINITY, 1.0f64), |(lo, hi), p| (lo.min(p.0), hi.max(p.0)));
    let (y_min, y_max) = all().fold((f64::INFINITY, 1.0f64), |(lo, hi), p| (lo.min(p.1), hi.max(p.1)));
    let x_range = (x_min.min(x_max / 2.0).max(1.0))..(x_max * 1.05);
    let y_range = (y_min.min(y_max / 2.0) * 0.7).max(0.1)..(y_max * 1.5);
    for (area, panel) in areas.iter().zip(panels) {
        let mut chart = ChartBuilder::on(area)
            .caption(&panel.title, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(x_range.clone().log_scale().base(2.0), y_range.clone().log_scale())
            .map_err(|x| e(&x))?;
        chart
            .configure_mesh()
            .x_desc("nodes")
            .y_desc("µs per barrier")
            .x_label_formatter(&|x| format!("{}", x.round() as u64))
            .draw()
            .map_err(|x| e(&x))?;
        for s in &panel.series {
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
            .label_font(("sans-serif", 12))
            .draw()
            .map_err(|x| e(&x))?;
    }
    root.present().map_err(|x| e(&x))?;
    Ok(())
}
