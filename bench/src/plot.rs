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
    /// What the line is of (an algorithm's name, a contender): lines with
    /// the same key have the same colour, in every plot ([`colour_of`]).
    pub key: String,
}

/// Keys with a colour of their own, in palette order; any other key gets a
/// colour from its hash.
const KNOWN_KEYS: [&str; 16] = [
    "shuffle",
    "dissemination",
    "tree2",
    "tree3",
    "tree4",
    "tree2-p2p",
    "tree4-p2p",
    "concurrent",
    "onephase",
    "auto",
    "udp",
    "openmpi-yield",
    "openmpi-default",
    "interposer",
    "tree7",
    "tree8",
];

/// Colours of [`KNOWN_KEYS`], in order: distinct and dark enough on white.
const KNOWN_COLOURS: [(u8, u8, u8); 16] = [
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
    (188, 189, 34),
    (0, 0, 0),
    (23, 190, 207),
    (120, 0, 60),
    (0, 90, 90),
    (200, 160, 0),
    (90, 60, 160),
    (0, 60, 140),
];

/// The colour of the lines with key `key`: the same in every plot.
pub fn colour_of(key: &str) -> RGBAColor {
    match KNOWN_KEYS.iter().position(|k| *k == key) {
        Some(i) => {
            let (r, g, b) = KNOWN_COLOURS[i];
            RGBColor(r, g, b).to_rgba()
        }
        None => {
            let hash = key.bytes().fold(0x811C_9DC5u32, |h, b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193));
            Palette99::pick(hash as usize).to_rgba()
        }
    }
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
const FONT_PATHS: [&str; 2] = ["/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", "/usr/share/fonts/TTF/DejaVuSans.ttf"];

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
    log2_x_vs_time(stem, title, Axes { x: "nodes", y: "µs per barrier" }, panels)
}

/// What a figure's axes say.
#[derive(Clone, Copy, Debug)]
pub struct Axes<'a> {
    /// Under the x axis (powers of two: nodes, bytes).
    pub x: &'a str,
    /// Beside the y axis (a time in µs).
    pub y: &'a str,
}

/// As [`nodes_vs_time`], for any x that grows in powers of two (message
/// sizes, ranks) and any time on y, with `axes`' descriptions.
pub fn log2_x_vs_time(stem: &Path, title: &str, axes: Axes, panels: &[Panel]) -> Result<[PathBuf; 2]> {
    if panels.is_empty() {
        bail!("nothing to plot into {}", stem.display());
    }
    register_font()?;
    let legend_rows = panels.iter().map(|p| p.series.len().div_ceil(2)).max().unwrap_or(0) as u32;
    let size = ((560 * panels.len() as u32 + 40).max(900), 540 + 14 + 18 * legend_rows);
    let svg = stem.with_extension("svg");
    let png = stem.with_extension("png");
    draw(SVGBackend::new(&svg, size).into_drawing_area(), title, axes, panels).map_err(|e| anyhow!("plotting {}: {e}", svg.display()))?;
    draw(BitMapBackend::new(&png, size).into_drawing_area(), title, axes, panels).map_err(|e| anyhow!("plotting {}: {e}", png.display()))?;
    Ok([svg, png])
}

fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, title: &str, axes: Axes, panels: &[Panel]) -> Result<(), String> {
    let e = |x: &dyn std::fmt::Display| x.to_string();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let root = root.titled(title, ("sans-serif", 20)).map_err(|x| e(&x))?;
    let areas = root.split_evenly((1, panels.len()));
    // One scale for all panels, so that they compare at a glance.
    let all = || panels.iter().flat_map(|p| p.series.iter().flat_map(|s| s.points.iter()));
    let (x_min, x_max) = all().fold((f64::INFINITY, 1.0f64), |(lo, hi), p| (lo.min(p.0), hi.max(p.0)));
    let (y_min, y_max) = all().fold((f64::INFINITY, 1.0f64), |(lo, hi), p| (lo.min(p.1), hi.max(p.1)));
    // x on a log2 axis drawn as a linear one over the exponent, so that
    // ticks fall on whole powers of two and no label repeats.
    let (lo, hi) = (x_min.max(1.0).log2().floor(), x_max.max(2.0).log2().ceil().max(x_min.max(1.0).log2().floor() + 1.0));
    let x_range = (lo - 0.05)..(hi + 0.05);
    let ticks = (hi - lo) as usize + 1;
    let y_range = (y_min.min(y_max / 2.0) * 0.7).max(0.1)..(y_max * 1.5);
    for (area, panel) in areas.iter().zip(panels) {
        // The legend goes below the chart, outside the data.
        let rows = panel.series.len().div_ceil(2) as u32;
        let legend_height = 14 + 18 * rows;
        let (chart_area, legend_area) = area.split_vertically(area.dim_in_pixel().1.saturating_sub(legend_height));
        let mut chart = ChartBuilder::on(&chart_area)
            .caption(&panel.title, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(x_range.clone(), y_range.clone().log_scale())
            .map_err(|x| e(&x))?;
        chart
            .configure_mesh()
            .x_desc(axes.x)
            .y_desc(axes.y)
            .x_labels(ticks)
            .x_label_formatter(&|x| {
                let whole = x.round();
                if (x - whole).abs() < 1e-6 && whole >= 0.0 {
                    format!("{}", 2u64.pow(whole as u32))
                } else {
                    String::new()
                }
            })
            .draw()
            .map_err(|x| e(&x))?;
        let mut legend = Vec::new();
        for s in &panel.series {
            let style = colour_of(&s.key).stroke_width(2);
            let points: Vec<(f64, f64)> = s.points.iter().map(|&(n, t)| (n.max(1.0).log2(), t)).collect();
            if s.dashed {
                chart.draw_series(DashedLineSeries::new(points, 8, 5, style)).map_err(|x| e(&x))?;
            } else {
                if points.len() <= 2 {
                    // A figure's few points (a paper's reported values): marked.
                    chart.draw_series(points.iter().map(|&p| Circle::new(p, 5, style.filled()))).map_err(|x| e(&x))?;
                }
                chart.draw_series(LineSeries::new(points, style)).map_err(|x| e(&x))?;
            }
            legend.push((s.label.clone(), style, s.dashed));
        }
        let column = (legend_area.dim_in_pixel().0 / 2) as i32;
        for (i, (label, style, dashed)) in legend.into_iter().enumerate() {
            let (x, y) = (70 + column * (i as i32 % 2), 8 + 18 * (i as i32 / 2));
            if dashed {
                for d in 0..3 {
                    legend_area.draw(&PathElement::new(vec![(x + d * 8, y + 6), (x + d * 8 + 5, y + 6)], style)).map_err(|x| e(&x))?;
                }
            } else {
                legend_area.draw(&PathElement::new(vec![(x, y + 6), (x + 21, y + 6)], style)).map_err(|x| e(&x))?;
            }
            legend_area.draw(&Text::new(label, (x + 28, y), ("sans-serif", 12))).map_err(|x| e(&x))?;
        }
    }
    root.present().map_err(|x| e(&x))?;
    Ok(())
}
