// diff: per tensor, the largest absolute difference between two checkpoints (files equal bit
// for bit, and only those, are identical); tensors whose
// shapes differ or that exist in one file only are listed as such, and the attributes of each
// dataset that differ (its checksum); then the attributes of the file, /model and /optimizer
// that differ (the step, the loss scale, the run's settings).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "commands.hpp"
#include "dtrain/ckpt/file.hpp"

namespace dtrain_ckpt {
namespace {

// |x - y| of two numbers (equal infinities are 0 apart), 0 for two NaNs, which are equal; a NaN
// against a number has no distance: NaN, which the caller counts.
double distance(float x, float y) {
  if (std::isnan(x) || std::isnan(y)) return std::isnan(x) && std::isnan(y) ? 0.0 : NAN;
  return x == y ? 0.0 : std::fabs(static_cast<double>(x) - static_cast<double>(y));
}

// The attributes of `object` (none where a file lacks it, as a file that is not a checkpoint
// may) that differ between the files, one line each: true if any.
bool attributes_differ(const dtrain::ckpt::CheckpointFile& fa, const dtrain::ckpt::CheckpointFile& fb,
                       const std::string& object) {
  const auto of = [&](const dtrain::ckpt::CheckpointFile& f) {
    return f.has_object(object) ? f.attributes(object) : dtrain::ckpt::AttributeList{};
  };
  const auto types_of = [&](const dtrain::ckpt::CheckpointFile& f) {
    return f.has_object(object) ? f.attribute_types(object) : dtrain::ckpt::AttributeList{};
  };
  const dtrain::ckpt::AttributeList xa = of(fa), xb = of(fb), ta = types_of(fa), tb = types_of(fb);
  const auto value = [](const dtrain::ckpt::AttributeList& list, const std::string& name) -> const std::string* {
    for (const auto& [n, v] : list)
      if (n == name) return &v;
    return nullptr;
  };
  bool differ = false;
  const auto compare = [&](const std::string& name) {
    const std::string *va = value(xa, name), *vb = value(xb, name);
    // The same text in another type (format_version 1 as a string) is another file: a
    // resume reads the type too.
    const bool same_type = va && vb && *value(ta, name) == *value(tb, name);
    if (va && vb && *va == *vb && same_type) return;
    differ = true;
    const std::string label = "attribute " + object + " " + name;
    if (va && vb && !same_type) {
      std::printf("%-44s %s -> %s\n", label.c_str(), (*value(ta, name) + " " + *va).c_str(),
                  (*value(tb, name) + " " + *vb).c_str());
    } else if (!va || !vb) {
      std::printf("%-44s only in %s\n", label.c_str(), (va ? fa : fb).path().c_str());
    } else if (va->find('\n') != std::string::npos || vb->find('\n') != std::string::npos) {
      std::printf("%-44s differs\n", label.c_str());  // run_config: many lines
    } else {
      std::printf("%-44s %s -> %s\n", label.c_str(), va->c_str(), vb->c_str());
    }
  };
  for (const auto& entry : xa) compare(entry.first);
  for (const auto& entry : xb)
    if (!value(xa, entry.first)) compare(entry.first);
  return differ;
}

}  // namespace

int diff(const std::string& a, const std::string& b) {
  namespace ck = dtrain::ckpt;
  const ck::CheckpointFile fa(a), fb(b);
  bool differ = false;
  double overall = 0;
  std::size_t overall_nan = 0;
  for (const ck::DatasetInfo& da : fa.datasets()) {
    const ck::DatasetInfo* db = fb.find(da.path);
    if (!db) {
      std::printf("%-44s only in %s\n", da.path.c_str(), a.c_str());
      differ = true;
      continue;
    }
    if (da.shape != db->shape || da.dtype != "float32" || db->dtype != "float32") {
      std::printf("%-44s shapes or dtypes differ\n", da.path.c_str());
      differ = true;
      continue;
    }
    const std::vector<float> x = fa.read(da.path), y = fb.read(da.path);
    double max_abs = 0;
    std::size_t other_bits = 0;  // -0 against 0, NaNs of other payloads: equal values, other bits
    std::size_t nan_against_number = 0;  // no distance
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double d = distance(x[i], y[i]);
      if (std::isnan(d)) {
        ++nan_against_number;
        continue;
      }
      max_abs = std::fmax(max_abs, d);
      other_bits += d == 0 && std::memcmp(&x[i], &y[i], sizeof(float)) != 0;
    }
    std::string notes;
    if (other_bits > 0)
      notes += "; values equal but stored as other bits: " + std::to_string(other_bits) + "; -0 and 0, or NaNs";
    if (nan_against_number > 0) notes += "; NaN against a number: " + std::to_string(nan_against_number);
    std::printf("%-44s max_abs_diff %.9g%s\n", da.path.c_str(), max_abs,
                notes.empty() ? "" : (" (" + notes.substr(2) + ")").c_str());
    differ = differ || max_abs > 0 || other_bits > 0 || nan_against_number > 0;
    overall = std::fmax(overall, max_abs);
    overall_nan += nan_against_number;
    differ = attributes_differ(fa, fb, da.path) || differ;  // its checksum: a copy may be damaged there
  }
  for (const ck::DatasetInfo& db : fb.datasets()) {
    if (!fa.find(db.path)) {
      std::printf("%-44s only in %s\n", db.path.c_str(), b.c_str());
      differ = true;
    }
  }
  for (const char* object : {"/", "/model", "/optimizer"})
    differ = attributes_differ(fa, fb, object) || differ;
  std::printf("%s (max abs difference %.9g%s)\n", differ ? "differ" : "identical", overall,
              overall_nan > 0 ? ("; NaN against a number: " + std::to_string(overall_nan)).c_str() : "");
  return differ ? 1 : 0;
}

}  // namespace dtrain_ckpt
