#include "loom/train/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>
#include <vector>

#include "loom/core/atomic_file.h"
#include "loom/core/error.h"
#include "loom/core/json.h"
#include "loom/data/text.h"
#include "loom/train/config_file.h"
#include "loom/train/progress.h"

namespace loom::train {
namespace fs = std::filesystem;
namespace {

const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd",
                               "#ff7f0e", "#8c564b", "#e377c2", "#17becf"};

std::string escape(const std::string& s) {
  std::string out;
  for (const char c : s) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

std::string base64(const std::string& bytes) {
  const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t v = uint32_t(uint8_t(bytes[i])) << 16;
    if (i + 1 < bytes.size()) v |= uint32_t(uint8_t(bytes[i + 1])) << 8;
    if (i + 2 < bytes.size()) v |= uint8_t(bytes[i + 2]);
    out += a[v >> 18 & 63];
    out += a[v >> 12 & 63];
    out += i + 1 < bytes.size() ? a[v >> 6 & 63] : '=';
    out += i + 2 < bytes.size() ? a[v & 63] : '=';
  }
  return out;
}

std::string num(double v, int digits = 4) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  return buf;
}

std::vector<Json> read_jsonl(const std::string& path, bool required) {
  std::vector<Json> lines;
  if (!fs::is_regular_file(path)) {
    LOOM_CHECK(!required) << "report: " << path << " does not exist (not a run directory?)";
    return lines;
  }
  const std::string text = read_text_file(path);
  size_t line_no = 0;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    ++line_no;
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    if (line.empty()) continue;
    // A last line without its newline is a record cut short (a crash while it was written):
    // not a record, and not the file's fault (core/jsonl_file.h).
    if (end == text.size() && !text.ends_with('\n')) {
      try {
        lines.push_back(Json::parse(line, path));
      } catch (const std::exception&) {
      }
      continue;
    }
    lines.push_back(Json::parse(line, path + ", line " + std::to_string(line_no)));
  }
  return lines;
}

// The number at `path` ("time_s/compute") of a metrics line, if there is one.
const Json* lookup(const Json& line, const std::string& path) {
  const Json* v = &line;
  for (size_t at = 0; v && v->is_object();) {
    const size_t slash = path.find('/', at);
    v = v->find(path.substr(at, slash == std::string::npos ? std::string::npos : slash - at));
    if (slash == std::string::npos) return v && v->is_number() ? v : nullptr;
    at = slash + 1;
  }
  return nullptr;
}

struct Series {
  std::string name;
  std::vector<double> x, y;
};

Series series(const std::vector<Json>& lines, const std::string& path, const std::string& name,
              double scale = 1) {
  Series s{name, {}, {}};
  for (const Json& line : lines) {
    const Json* step = line.find("step");
    const Json* v = lookup(line, path);
    if (step && step->is_int() && v && std::isfinite(v->as_double())) {
      s.x.push_back(double(step->as_int()));
      s.y.push_back(v->as_double() * scale);
    }
  }
  return s;
}

struct Marker {
  double x;
  std::string label;
};

// A line plot (or, stacked, areas of cumulative sums) as inline SVG.
std::string plot(std::string title, const std::string& unit, std::vector<Series> all,
                 const std::vector<Marker>& markers = {}, bool stacked = false) {
  all.erase(std::remove_if(all.begin(), all.end(), [](const Series& s) { return s.x.empty(); }),
            all.end());
  if (all.empty()) return "<p class=\"empty\">" + escape(title) + ": nothing recorded.</p>\n";
  if (!unit.empty()) title += " (" + unit + ")";
  if (stacked)  // each series on top of the ones before (they share their steps)
    for (size_t k = 1; k < all.size(); ++k)
      for (size_t i = 0; i < all[k].y.size() && i < all[k - 1].y.size(); ++i)
        all[k].y[i] += all[k - 1].y[i];
  double x0 = 1e300, x1 = -1e300, y0 = stacked ? 0 : 1e300, y1 = -1e300;
  for (const Series& s : all)
    for (size_t i = 0; i < s.x.size(); ++i) {
      x0 = std::min(x0, s.x[i]);
      x1 = std::max(x1, s.x[i]);
      y0 = std::min(y0, s.y[i]);
      y1 = std::max(y1, s.y[i]);
    }
  if (x1 <= x0) x1 = x0 + 1;
  if (y1 <= y0) y1 = y0 + (y0 == 0 ? 1 : std::fabs(y0) * 0.1);
  const double pad = (y1 - y0) * 0.05;
  // The axis spans the data (with a margin), never below zero for a series that is not.
  y0 = stacked ? y0 : y0 >= 0 ? std::max(0.0, y0 - pad) : y0 - pad;
  y1 += pad;
  const double W = 760, H = 260, left = 64, right = 16, top = 28, bottom = 36;
  auto px = [&](double x) { return left + (x - x0) / (x1 - x0) * (W - left - right); };
  auto py = [&](double y) { return top + (y1 - y) / (y1 - y0) * (H - top - bottom); };
  std::ostringstream o;
  o << "<svg class=\"plot\" viewBox=\"0 0 " << W << " " << H << "\" width=\"" << W << "\" height=\""
    << H << "\" role=\"img\"><title>" << escape(title) << "</title>\n";
  o << "<text x=\"" << left << "\" y=\"18\" class=\"title\">" << escape(title) << "</text>\n";
  for (int t = 0; t <= 4; ++t) {  // grid lines and tick labels
    const double yv = y0 + (y1 - y0) * t / 4, xv = x0 + (x1 - x0) * t / 4;
    o << "<line x1=\"" << left << "\" x2=\"" << W - right << "\" y1=\"" << py(yv) << "\" y2=\""
      << py(yv) << "\" class=\"grid\"/><text x=\"" << left - 6 << "\" y=\"" << py(yv) + 4
      << "\" class=\"tick\" text-anchor=\"end\">" << num(yv, 3) << "</text>\n";
    o << "<text x=\"" << px(xv) << "\" y=\"" << H - bottom + 16
      << "\" class=\"tick\" text-anchor=\"middle\">" << num(std::round(xv), 6) << "</text>\n";
  }
  o << "<text x=\"" << (left + W - right) / 2 << "\" y=\"" << H - 4
    << "\" class=\"tick\" text-anchor=\"middle\">step</text>\n";
  for (size_t k = all.size(); k-- > 0;) {  // stacked: the top area first, so each shows
    const Series& s = all[k];
    const char* color = kColors[k % 8];
    std::ostringstream pts;
    for (size_t i = 0; i < s.x.size(); ++i) pts << px(s.x[i]) << "," << py(s.y[i]) << " ";
    if (stacked) {
      o << "<polygon points=\"" << px(s.x.front()) << "," << py(0) << " " << pts.str()
        << px(s.x.back()) << "," << py(0) << "\" fill=\"" << color << "\" fill-opacity=\"0.8\"/>\n";
    } else {
      o << "<polyline points=\"" << pts.str() << "\" fill=\"none\" stroke=\"" << color
        << "\" stroke-width=\"1.8\"/>\n";
      if (s.x.size() <= 40)
        for (size_t i = 0; i < s.x.size(); ++i)
          o << "<circle cx=\"" << px(s.x[i]) << "\" cy=\"" << py(s.y[i]) << "\" r=\"2.5\" fill=\""
            << color << "\"/>";
    }
  }
  for (const Marker& m : markers) {
    if (m.x < x0 || m.x > x1) continue;
    o << "<line x1=\"" << px(m.x) << "\" x2=\"" << px(m.x) << "\" y1=\"" << top + 1 << "\" y2=\""
      << H - bottom - 1 << "\" class=\"marker\"><title>" << escape(m.label) << "</title></line>\n";
  }
  o << "<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << W - left - right
    << "\" height=\"" << H - top - bottom << "\" class=\"frame\"/>\n";
  double lx = left + 10 + 7.5 * double(title.size());  // the legend follows the title
  for (size_t k = 0; k < all.size(); ++k) {
    o << "<rect x=\"" << lx << "\" y=\"9\" width=\"10\" height=\"10\" fill=\"" << kColors[k % 8]
      << "\"/><text x=\"" << lx + 14 << "\" y=\"18\" class=\"legend\">" << escape(all[k].name)
      << "</text>";
    lx += 24 + 6.5 * double(all[k].name.size());
  }
  o << "</svg>\n";
  return o.str();
}

std::string section(const std::string& id, const std::string& title, const std::string& body) {
  return "<section id=\"" + id + "\"><h2>" + escape(title) + "</h2>\n" + body + "</section>\n";
}

std::string table(const std::vector<std::vector<std::string>>& rows) {
  std::string o = "<table>";
  for (size_t r = 0; r < rows.size(); ++r) {
    o += "<tr>";
    for (const std::string& cell : rows[r])
      o += (r == 0 ? "<th>" : "<td>") + escape(cell) + (r == 0 ? "</th>" : "</td>");
    o += "</tr>";
  }
  return o + "</table>\n";
}

std::string scalar_text(const Json& v) {
  if (v.is_double()) return num(v.as_double(), 6);
  if (v.is_int()) return std::to_string(v.as_int());
  if (v.is_string()) return v.as_string();
  if (v.is_bool()) return v.as_bool() ? "true" : "false";
  return v.dump();
}

// A summary value with its unit: "92.3 %", "412 MB", "14m53s", "623.6 images/s".
std::string summary_text(const std::string& key, const Json& v, const std::string& unit_name) {
  if (!v.is_number()) return scalar_text(v);
  const double x = v.as_double();
  char text[64];
  if (key == "mfu")
    std::snprintf(text, sizeof text, "%.1f %%", 100 * x);
  else if (key == "mem_peak_bytes")
    std::snprintf(text, sizeof text, x >= 1e9 ? "%.2f GB" : "%.0f MB",
                  x >= 1e9 ? x / 1e9 : x / 1e6);
  else if (key == "elapsed_s")
    return format_duration(x);
  else if (key == "img_per_s" || key == "tok_per_s")
    std::snprintf(text, sizeof text, "%.1f %s", x, unit_name.c_str());
  else
    return scalar_text(v);
  return text;
}

std::string image(const std::string& path, const std::string& caption) {
  return "<figure><img alt=\"" + escape(caption) + "\" src=\"data:image/png;base64," +
         base64(read_text_file(path)) + "\"/><figcaption>" + escape(caption) +
         "</figcaption></figure>\n";
}

}  // namespace

std::vector<Json> last_record_per_step(std::vector<Json> lines) {
  std::map<int64_t, Json> by_step;
  for (Json& line : lines) {
    const Json* step = line.find("step");
    if (step && step->is_int()) by_step[step->as_int()] = std::move(line);
  }
  std::vector<Json> out;
  for (auto& [step, line] : by_step) out.push_back(std::move(line));
  return out;
}

ReportSummary write_report(const std::string& run_dir, const std::string& out_path) {
  ReportSummary r;
  r.path = out_path.empty() ? (fs::path(run_dir) / "report.html").string() : out_path;
  // The step records (the final evaluation's record, without a loss, is in eval.json too).
  std::vector<Json> lines;
  for (Json& line : read_jsonl((fs::path(run_dir) / "metrics.jsonl").string(), true))
    if (line.contains("loss")) lines.push_back(std::move(line));
  lines = last_record_per_step(std::move(lines));
  std::vector<Json> events = read_jsonl((fs::path(run_dir) / "events.jsonl").string(), false);
  const std::string name = fs::path(run_dir).filename().string();
  const bool gpt = !lines.empty() && lines.back().contains("tok_per_s");
  const std::string unit = gpt ? "tok_per_s" : "img_per_s";

  // Marks: events with a step (resumptions among them).
  std::vector<Marker> marks;
  std::vector<std::vector<std::string>> event_rows = {{"step", "time", "event", "details"}};
  for (const Json& e : events) {
    std::string details, step = "", what = e.find("event") ? scalar_text(e.at("event")) : "?";
    for (const auto& [key, value] : e.items())
      if (key == "step")
        step = scalar_text(value);
      else if (key != "time" && key != "event")
        details += key + " " + scalar_text(value) + "; ";
    if (e.find("step") && e.at("step").is_int() && what != "started")  // starts: in the table
      marks.push_back({double(e.at("step").as_int()), what + " at step " + step});
    event_rows.push_back({step, e.find("time") ? scalar_text(e.at("time")) : "", what, details});
  }
  r.events = int(event_rows.size()) - 1;

  std::string body;
  // Summary: what the run is and how it ended.
  std::vector<std::vector<std::string>> summary = {{"", ""}};
  summary.push_back({"run", run_dir});
  // model.kind as the run's config.toml says (the run directory's own record of it).
  const fs::path run_config = fs::path(run_dir) / "config.toml";
  if (fs::exists(run_config))
    summary.push_back(
        {"model", ConfigFile(run_config.string(), {}).get_string("model", "kind", "")});
  // Where it ran: the last start's machine, threads and processes (events.jsonl, "started").
  for (auto e = events.rbegin(); e != events.rend(); ++e)
    if (e->find("event") && scalar_text(e->at("event")) == "started") {
      for (const char* key : {"cpu", "device", "threads", "processes", "precision"})
        if (const Json* v = e->find(key)) summary.push_back({key, scalar_text(*v)});
      break;
    }
  if (!lines.empty()) {
    const Json& last = lines.back();
    const std::string unit_name = gpt ? "tokens/s" : "images/s";
    const std::pair<const char*, const char*> keys[] = {{"step", "last step"},
                                                        {"loss", "last loss"},
                                                        {"elapsed_s", "elapsed"},
                                                        {unit.c_str(), "throughput"},
                                                        {"mfu", "MFU (of the GEMM ceiling)"},
                                                        {"mem_peak_bytes", "peak memory"}};
    for (const auto& [key, label] : keys)
      if (const Json* v = last.find(key))
        summary.push_back({label, summary_text(key, *v, unit_name)});
  }
  const std::string config_path = (fs::path(run_dir) / "config.toml").string();
  std::string config = fs::is_regular_file(config_path)
                           ? "<details><summary>config.toml</summary><pre>" +
                                 escape(read_text_file(config_path)) + "</pre></details>\n"
                           : "";
  body += section("summary", "Run " + name, table(summary) + config);

  auto add_plot = [&](const std::string& svg) {
    if (svg.rfind("<svg", 0) == 0) ++r.plots;
    return svg;
  };
  body +=
      section("loss", "Loss",
              add_plot(plot("loss", gpt ? "nats/token" : "flow matching",
                            {series(lines, "loss", "train"),
                             series(lines, gpt ? "val/nats_per_token" : "val/loss", "held-out")},
                            marks)));
  body += section("lr", "Learning rate",
                  add_plot(plot("learning rate", "lr", {series(lines, "lr", "lr")})));
  body += section("throughput", "Throughput and MFU",
                  add_plot(plot("throughput", gpt ? "tokens/s" : "images/s",
                                {series(lines, unit, gpt ? "tokens/s" : "images/s")})) +
                      add_plot(plot("model FLOPs utilisation", "%",
                                    {series(lines, "mfu", "of the GEMM ceiling", 100),
                                     series(lines, "mfu_hardware", "of the hardware peak", 100)})));
  std::vector<Series> mem;
  for (const char* cat :
       {"parameters", "gradients", "optimizer", "activations", "communication", "other"})
    mem.push_back(series(lines, std::string("mem/") + cat + "/live", cat, 1e-6));
  body += section("memory", "Memory by category (live MB at each logged step)",
                  add_plot(plot("live memory, stacked", "MB", mem, {}, true)) +
                      add_plot(plot("all categories", "MB",
                                    {series(lines, "mem_peak_bytes", "peak", 1e-6),
                                     series(lines, "mem_live_bytes", "live", 1e-6)})));
  body += section("step-time", "Step time split (seconds per step)",
                  add_plot(plot("step time", "s",
                                {series(lines, "time_s/compute", "compute"),
                                 series(lines, "time_s/comm_exposed", "exposed communication"),
                                 series(lines, "time_s/idle", "waiting for data")},
                                {}, true)));

  std::string eval;
  const std::string eval_path = (fs::path(run_dir) / "eval.json").string();
  if (fs::is_regular_file(eval_path)) {
    const Json e = Json::parse(read_text_file(eval_path), eval_path);
    std::vector<std::vector<std::string>> rows = {{"eval.json", "value"}};
    for (const auto& [key, value] : e.items())
      if (!value.is_object() && !value.is_array()) rows.push_back({key, scalar_text(value)});
    eval += table(rows);
  } else {
    eval +=
        "<p class=\"empty\">no eval.json (the run has not finished, or evaluates nothing at its "
        "end).</p>\n";
  }
  std::vector<Series> val;
  for (const char* key : {"loss", "nats_per_token", "nats_per_byte", "bits_per_byte"})
    val.push_back(series(lines, std::string("val/") + key, std::string("held-out ") + key));
  body += section("eval", "Evaluation",
                  eval + add_plot(plot("held-out figures over training", "", val)));

  std::string samples;
  std::vector<fs::path> grids;
  if (fs::is_directory(fs::path(run_dir) / "samples"))
    for (const auto& f : fs::directory_iterator(fs::path(run_dir) / "samples"))
      if (f.path().extension() == ".png") grids.push_back(f.path());
  std::sort(grids.begin(), grids.end());
  for (const fs::path& g : grids) {
    samples += image(g.string(), "step " + std::to_string(std::stoll(g.stem().string().substr(5))));
    ++r.images;
  }
  if (fs::is_regular_file(fs::path(run_dir) / "samples.png")) {
    samples += image((fs::path(run_dir) / "samples.png").string(), "end of training (EMA)");
    ++r.images;
  }
  if (samples.empty())
    samples =
        "<p class=\"empty\">no sample grids (a GPT, or sample.every = 0 before the end).</p>\n";
  body += section("samples", "Samples over training", "<div class=\"grids\">" + samples + "</div>");
  body += section("events", "Events",
                  event_rows.size() > 1 ? table(event_rows)
                                        : "<p class=\"empty\">no events: no restarts, skipped "
                                          "steps, spikes or stragglers.</p>\n");

  std::vector<Series> ranks = {series(lines, "time_s/step", "rank 0")};
  std::vector<fs::path> rank_files;
  if (fs::is_directory(fs::path(run_dir) / "logs"))
    for (const auto& f : fs::directory_iterator(fs::path(run_dir) / "logs"))
      if (f.path().filename().string().rfind("metrics-rank-", 0) == 0)
        rank_files.push_back(f.path());
  std::sort(rank_files.begin(), rank_files.end(), [](const fs::path& a, const fs::path& b) {
    return std::stoi(a.stem().string().substr(13)) < std::stoi(b.stem().string().substr(13));
  });
  for (const fs::path& f : rank_files)
    ranks.push_back(series(read_jsonl(f.string(), false), "time_s/step",
                           "rank " + f.stem().string().substr(13)));
  body += section("ranks", "Ranks (" + std::to_string(ranks.size()) + ")",
                  add_plot(plot("step time by rank", "s", ranks, marks)));

  const std::string html =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Loom run " +
      escape(name) +
      "</title>\n<style>body{font:14px system-ui,sans-serif;margin:24px;max-width:1100px;color:"
      "#222}h2{border-bottom:1px solid #ccc;padding-bottom:4px}table{border-collapse:collapse;"
      "margin:8px 0}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left}svg.plot{display:"
      "block;margin:8px 0;background:#fff}.title{font-weight:600;font-size:13px}.tick,.legend{"
      "font-size:11px;fill:#444}.grid{stroke:#e4e4e4}.marker{stroke:#000;stroke-dasharray:4 3;"
      "stroke-width:1.2}.frame{fill:none;stroke:#999;shape-rendering:crispEdges}.grids{display:"
      "flex;flex-wrap:wrap;gap:12px}figure{margin:0}img{"
      "image-rendering:pixelated;height:320px}.empty{color:#777}pre{background:#f6f6f6;padding:8px;"
      "overflow:auto}</style></head>\n<body>\n<h1>Loom run " +
      escape(name) + "</h1>\n" + body + "</body></html>\n";
  write_file_atomic(r.path, html);
  return r;
}

}  // namespace loom::train
